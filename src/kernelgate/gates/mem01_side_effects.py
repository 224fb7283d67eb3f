"""MEM-01: inputs untouched, guard bands intact, outputs independent of poison, no aliasing."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from kernelgate.gates.base import Gate, GateContext, GateKind, GateResult, Run
from kernelgate.inputs.placement import POISONS, PlacedTensor, guard_damage, view_bytes_changed
from kernelgate.oracle.compare import first_output_difference
from kernelgate.sandbox.wire import WireTensor


class SideEffectsGate(Gate):
    id: ClassVar[str] = "MEM-01"
    kind: ClassVar[GateKind] = GateKind.EXACT
    title: ClassVar[str] = "side effects and memory hygiene"

    def run(self, ctx: GateContext) -> GateResult:
        case = ctx.drawn_case("input A under two poisons", ctx.case_seed(self.id, 0))
        in_place = set(ctx.contract.postcondition.in_place)
        names = [getattr(spec, "name", f"arg{i}") for i, spec in enumerate(ctx.contract.inputs)]
        runs = [
            ctx.run(self.id, case, poison=p, hold_bytes=h, side_effects=True)
            for p, h in zip(POISONS, (0, 8192 + 64))
        ]
        for run in runs:
            findings = self._input_findings(run, names, in_place)
            findings += self._allocation_findings(run)
            findings += self._alias_findings(run, names, in_place)
            if findings:
                return self.failed(ctx, findings[0]["problem"], run, findings)
        first, second = runs
        labels = (f"with_poison_{POISONS[0]:#x}", f"with_poison_{POISONS[1]:#x}")
        difference = first_output_difference(first.outputs, second.outputs, labels)
        if difference is not None:
            k, findings = difference
            return self.failed(
                ctx,
                f"output {k} changes with the poison in unwritten memory or guard bands "
                "(an unwritten output or an out-of-bounds read)",
                second,
                findings,
            )
        return self.passed(
            "inputs unchanged, guard bands intact, outputs identical under two poisons, "
            "no aliasing",
            {
                "poisons": [f"{p:#x}" for p in POISONS],
                "guarded_allocations": sum(len(r.result.allocations) for r in runs),
            },
        )

    @staticmethod
    def _input_findings(run: Run, names: list[str], in_place: set[str]) -> list[dict[str, Any]]:
        findings = []
        tensors = [p for p in run.placed if isinstance(p, PlacedTensor)]
        for i, (sent, after) in enumerate(zip(tensors, run.result.inputs_after)):
            name = names[i] if i < len(names) else f"arg{i}"
            if name not in in_place and (changed := view_bytes_changed(sent, after)):
                findings.append(
                    {
                        "problem": f"input {name} was modified",
                        "input": name,
                        "positions": [list(p) for p in changed],
                    }
                )
            if damaged := guard_damage(sent, after):
                findings.append(
                    {
                        "problem": f"guard band around input {name} was written "
                        "(out-of-bounds write)",
                        "input": name,
                        "storage_elements": damaged,
                    }
                )
        return findings

    @staticmethod
    def _allocation_findings(run: Run) -> list[dict[str, Any]]:
        findings = []
        for index, (storage, guard, extent) in enumerate(run.result.allocations):
            raw = storage.storage.view(torch.uint8)
            itemsize = storage.storage.element_size()
            lo, hi = raw[: guard * itemsize], raw[(guard + extent) * itemsize :]
            poison = int(raw[0]) if raw.numel() else 0
            for side, band in (("before", lo), ("after", hi)):
                if band.numel() and not bool((band == band[0]).all()):
                    first = int(torch.nonzero(band != band[0])[0])
                    findings.append(
                        {
                            "problem": f"guard band {side} a buffer the candidate allocated was "
                            "written (out-of-bounds write)",
                            "allocation": index,
                            "byte_offset_into_band": first,
                            "poison": f"{poison:#x}",
                        }
                    )
        return findings

    @staticmethod
    def _alias_findings(run: Run, names: list[str], in_place: set[str]) -> list[dict[str, Any]]:
        findings = []
        for k, out in enumerate(run.raw_outputs):
            if not isinstance(out, WireTensor):
                continue
            for i, inp in enumerate(run.result.inputs_after):
                name = names[i] if i < len(names) else f"arg{i}"
                overlap = (
                    out.address < inp.address + inp.nbytes
                    and inp.address < out.address + out.nbytes
                )
                if overlap and name not in in_place:
                    findings.append(
                        {"problem": f"output {k} aliases input {name}", "output": k, "input": name}
                    )
        return findings
