"""RES-02: registers, spills and shared memory of every candidate kernel within the budget.

A kernel that needs more registers than the device gives a thread, spills to local memory
or asks for more shared memory than a block may have either fails to launch on the target
device or runs far slower than it should, and none of it shows in a value comparison. The
budget is the contract's (``execution.budget``: 255 registers per thread, 227 KiB shared
memory per block, no spills by default). Tolerance-free: the figures are the compiler's.

Where the figures come from (``sandbox/resources.py``): on the device, the compiled Triton
kernels the worker saw launched and ``cuobjdump`` on CUDA C++ extensions; in CPU mode, the
interpreted launches compiled offline for sm_90 (by a helper forked from the worker). A
kernel whose figures could not be obtained makes the gate ``skipped`` (never ``pass``)
unless another kernel already fails.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from kernelgate.gates.base import Gate, GateContext, GateKind, GateResult
from kernelgate.sandbox.resources import dump_resource_usage
from kernelgate.sandbox.session import ExecutionIncident

MAX_FINDINGS = 8


class ResourcesGate(Gate):
    id: ClassVar[str] = "RES-02"
    kind: ClassVar[GateKind] = GateKind.EXACT
    title: ClassVar[str] = "resource budget"

    def run(self, ctx: GateContext) -> GateResult:
        # One call of our own, so the launches are known even when RES-02 runs alone and so a
        # failure has a case to replay; earlier gates' launches in this session count too.
        case = ctx.drawn_case("reference shape, normal values", ctx.case_seed(self.id, 0))
        run = ctx.run(self.id, case)
        records = _unique(ctx.session.kernels)
        notes = [r.get("detail", "") for r in records if r.get("backend") == "note"]
        kernels, unmeasured = self._measure(ctx, records)
        if not kernels and not unmeasured:
            why = "; ".join(notes) or "PyTorch-only candidate: library kernels are not judged"
            return self.skipped(f"no candidate kernel was seen launching ({why})")
        budget = ctx.contract.execution.budget
        limits = {
            "registers": budget.registers_per_thread,
            "spill_bytes": budget.spill_bytes,
            "shared_bytes": budget.shared_memory_bytes,
        }
        findings = [
            {
                "kernel": k["name"],
                "resource": resource,
                "value": k[resource],
                "budget": limit,
                "source": k.get("source", ""),
            }
            for k in kernels
            for resource, limit in limits.items()
            if k.get(resource) is not None and k[resource] > limit
        ]
        evidence: dict[str, Any] = {
            "budget": limits,
            "kernels": kernels,
            "unmeasured": unmeasured,
            "largest_observed": {
                resource: max((k.get(resource) or 0 for k in kernels), default=0)
                for resource in limits
            },
        }
        if findings:
            worst = findings[0]
            return self.failed(
                ctx,
                f"{len(findings)} budget violation(s); first: kernel {worst['kernel']} uses "
                f"{worst['value']} {worst['resource']} (budget {worst['budget']})",
                run,
                findings[:MAX_FINDINGS],
                evidence,
            )
        if unmeasured:
            return self.skipped(
                f"resource usage of {len(unmeasured)} kernel(s) could not be obtained: "
                + "; ".join(f"{u['name']}: {u['error']}" for u in unmeasured[:3])
            )
        return self.passed(
            f"{len(kernels)} kernel(s) within the budget (at most "
            f"{evidence['largest_observed']['registers']} registers, "
            f"{evidence['largest_observed']['spill_bytes']} spill bytes, "
            f"{evidence['largest_observed']['shared_bytes']} shared bytes)",
            evidence,
        )

    @staticmethod
    def _measure(
        ctx: GateContext, records: list[dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        kernels: list[dict[str, Any]] = []
        unmeasured: list[dict[str, Any]] = []
        interpreted = [r for r in records if r.get("backend") == "triton-interpreter"]
        for record in records:
            backend = record.get("backend")
            if backend == "triton":
                if record.get("registers") is None:
                    unmeasured.append({"name": record.get("name"), "error": "no n_regs"})
                else:
                    kernels.append(record)
            elif backend == "cuda-extension":
                found, why = dump_resource_usage(str(record.get("path")))
                if not found:
                    unmeasured.append({"name": record.get("path"), "error": why})
                for k in found:
                    kernels.append(
                        {
                            "backend": "cuda-extension",
                            "source": f"cuobjdump --dump-resource-usage {record.get('path')}",
                            "name": k["name"],
                            "arch": k["arch"],
                            "registers": k["registers"],
                            # local memory per thread: spills, local arrays and call stack
                            # (cuobjdump does not tell them apart)
                            "spill_bytes": k["stack_bytes"] + k["local_bytes"],
                            "shared_bytes": k["static_shared_bytes"],
                            "stack_bytes": k["stack_bytes"],
                            "local_memory_bytes": k["local_bytes"],
                            "spill_source": "cuobjdump's STACK + LOCAL, all counted as spills "
                            "(no PTX to ask ptxas about; it includes any stack frame and local "
                            "arrays), erring towards failure",
                        }
                    )
        if interpreted:
            try:
                results = ctx.session.compile_resources(interpreted)
            except ExecutionIncident as incident:  # the worker died while compiling
                results = [{"name": r.get("name"), "error": str(incident)} for r in interpreted]
            for result in results:
                if "error" in result:
                    unmeasured.append({"name": result.get("name"), "error": result["error"]})
                else:
                    kernels.append(result)
        return kernels, unmeasured


def _unique(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Records deduplicated across worker restarts (each worker reports its own first sight)."""
    seen: set[str] = set()
    out = []
    for record in records:
        key = json.dumps(record, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            out.append(record)
    return out
