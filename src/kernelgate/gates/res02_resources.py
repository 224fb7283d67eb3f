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

import dataclasses
import json
from typing import Any, ClassVar

from kernelgate.gates.base import Gate, GateContext, GateKind, GateResult, Status
from kernelgate.sandbox.resources import dump_resource_usage, mangled_base_name
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
        findings = budget_findings(kernels, limits)
        evidence: dict[str, Any] = {
            "budget": limits,
            "kernels": kernels,
            "unmeasured": unmeasured,
            "largest_observed": largest_observed(kernels, limits),
        }
        if findings:
            return self.failed(ctx, failed_reason(findings), run, findings[:MAX_FINDINGS], evidence)
        if unmeasured:
            return self.skipped(unmeasured_reason(unmeasured))
        return self.passed(passed_reason(kernels, evidence), evidence)

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
                if why:  # no why and no kernel: a host-only library
                    unmeasured.append({"name": record.get("path"), "error": why})
                for k in found:
                    kernels.append(
                        {
                            "backend": "cuda-extension",
                            "source": f"cuobjdump --dump-resource-usage {record.get('path')}",
                            # the base name, as the launches the profile saw name it; the
                            # symbol as the library has it (Itanium-mangled for C++)
                            "name": mangled_base_name(k["name"]) or k["name"],
                            "symbol": k["name"],
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


def budget_findings(kernels: list[dict[str, Any]], limits: dict[str, int]) -> list[dict[str, Any]]:
    """Every (kernel, resource) over its limit."""
    return [
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


def largest_observed(kernels: list[dict[str, Any]], limits: dict[str, int]) -> dict[str, int]:
    return {
        resource: max((k.get(resource) or 0 for k in kernels), default=0) for resource in limits
    }


def failed_reason(findings: list[dict[str, Any]]) -> str:
    worst = findings[0]
    return (
        f"{len(findings)} budget violation(s); first: kernel {worst['kernel']} uses "
        f"{worst['value']} {worst['resource']} (budget {worst['budget']})"
    )


def unmeasured_reason(unmeasured: list[dict[str, Any]]) -> str:
    return f"resource usage of {len(unmeasured)} kernel(s) could not be obtained: " + "; ".join(
        f"{u['name']}: {u['error']}" for u in unmeasured[:3]
    )


def passed_reason(kernels: list[dict[str, Any]], evidence: dict[str, Any]) -> str:
    largest = evidence["largest_observed"]
    return (
        f"{len(kernels)} kernel(s) within the budget (at most {largest['registers']} registers, "
        f"{largest['spill_bytes']} spill bytes, {largest['shared_bytes']} shared bytes)"
    )


def launched_extension_kernels(result: GateResult, authorship: dict[str, Any]) -> GateResult:
    """RES-02's result judged on the extension kernels the candidate launched, not every
    kernel its CUDA extension holds (``cuobjdump`` lists them all, launched or not).

    Which ran is known only from AUTH-01's device profile (Kineto names every kernel the
    profiled call launched), taken after the gates; ``verify`` calls this then. Matched by
    base name (``unqualified_parts`` of the launch, ``mangled_base_name`` of the symbol).
    Where the profile is not a device one, or names none of the extension's kernels (a
    name this matching cannot read), every kernel stays judged, erring towards failure; the
    evidence says which it was. A pure function of its inputs: a resumed verification (the
    journal holds RES-02 as the gate left it) gets the same result.
    """
    from kernelgate.sandbox.authorship import unqualified_parts

    evidence = result.evidence
    extension = [k for k in evidence.get("kernels", []) if k.get("backend") == "cuda-extension"]
    if not extension or result.status is Status.SKIPPED:
        return result
    evidence = dict(evidence)
    if authorship.get("how") != "cuda-kineto":
        evidence["extension_kernels"] = (
            "every kernel of the extension judged: which launched is unknown "
            f"({authorship.get('why') or 'no device profile'})"
        )
        return dataclasses.replace(result, evidence=evidence)
    launched = {
        parts[-1]
        for k in authorship.get("kernels", [])
        if (parts := unqualified_parts(str(k.get("name", ""))))
    }
    # a symbol whose base name could not be read stays judged (it may be one that ran)
    readable = [k for k in extension if not k["name"].startswith("_Z")]
    unlaunched = [k for k in readable if k["name"] not in launched]
    if len(unlaunched) == len(extension):
        evidence["extension_kernels"] = (
            "every kernel of the extension judged: none matched a kernel the profiled call "
            "launched by name"
        )
        return dataclasses.replace(result, evidence=evidence)
    evidence["extension_kernels"] = (
        f"{len(extension) - len(unlaunched)} of the extension's {len(extension)} kernel(s) "
        "launched in the profiled call; only those judged"
    )
    if not unlaunched:
        return dataclasses.replace(result, evidence=evidence)
    kernels = [k for k in evidence["kernels"] if k not in unlaunched]
    evidence["kernels"] = kernels
    evidence["not_launched"] = [k["name"] for k in unlaunched]
    evidence["largest_observed"] = largest_observed(kernels, evidence["budget"])
    findings = budget_findings(kernels, evidence["budget"])
    if findings and result.counterexample is not None:
        counterexample = dataclasses.replace(
            result.counterexample, findings=findings[:MAX_FINDINGS]
        )
        return dataclasses.replace(
            result,
            reason=failed_reason(findings),
            counterexample=counterexample,
            evidence=evidence,
        )
    if evidence.get("unmeasured"):
        return dataclasses.replace(
            result,
            status=Status.SKIPPED,
            reason=unmeasured_reason(evidence["unmeasured"]),
            counterexample=None,
            evidence=evidence,
        )
    return dataclasses.replace(
        result,
        status=Status.PASS,
        reason=passed_reason(kernels, evidence),
        counterexample=None,
        evidence=evidence,
    )
