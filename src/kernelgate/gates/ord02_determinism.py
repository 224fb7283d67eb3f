"""ORD-02: bitwise identical outputs across repeats, new addresses and interleaved inputs."""

from __future__ import annotations

from typing import ClassVar

import torch

from kernelgate.gates.base import Gate, GateContext, GateKind, GateResult, Run
from kernelgate.oracle.compare import bitwise_mismatches, first_output_difference

# Which case each call runs, how many bytes the worker holds first (to move addresses), and
# whether the inputs go into the previous call's storages (the same addresses, new data: a
# cache keyed by data pointer answers with the old result).
SEQUENCE = [
    ("A", 0, False),
    ("A", 4096 + 192, False),
    ("B", 0, True),
    ("A", 65536 + 64, False),
    ("B", 1 << 20, False),
]


class DeterminismGate(Gate):
    id: ClassVar[str] = "ORD-02"
    kind: ClassVar[GateKind] = GateKind.EXACT
    title: ClassVar[str] = "determinism and no stale state"

    def run(self, ctx: GateContext) -> GateResult:
        cases = {
            name: ctx.drawn_case(f"input {name}", ctx.case_seed(self.id, i))
            for i, name in enumerate("AB")
        }
        first: dict[str, Run] = {}
        for call, (name, hold, reuse) in enumerate(SEQUENCE):
            run = ctx.run(self.id, cases[name], hold_bytes=hold, reuse_inputs=reuse)
            if name not in first:
                first[name] = run
                continue
            labels = ("first_call", f"call_{call}")
            difference = first_output_difference(first[name].outputs, run.outputs, labels)
            if difference is not None:
                k, findings = difference
                return self.failed(
                    ctx,
                    f"output {k} differs bitwise between two calls on {cases[name].label}",
                    run,
                    findings,
                    {"sequence": [n for n, _, _ in SEQUENCE]},
                )
        stale = self._stale(ctx, cases["A"], cases["B"], first["A"], first["B"])
        if stale is not None:
            return stale
        return self.passed(
            f"{len(SEQUENCE)} calls (repeats at new addresses, interleaved inputs) bitwise stable",
            {
                "sequence": [n for n, _, _ in SEQUENCE],
                "hold_bytes": [h for _, h, _ in SEQUENCE],
                "at_previous_addresses": [r for _, _, r in SEQUENCE],
            },
        )

    def _stale(self, ctx: GateContext, case_a, case_b, run_a: Run, run_b: Run) -> GateResult | None:
        """Different inputs whose oracle outputs differ must not give identical outputs."""
        for k, (a, b) in enumerate(zip(run_a.outputs, run_b.outputs)):
            if not isinstance(a, torch.Tensor) or a.shape != b.shape:
                continue
            want_a = ctx.expected(case_a)[k].to(a.dtype)
            want_b = ctx.expected(case_b)[k].to(a.dtype)
            if bitwise_mismatches(want_a, want_b) and not bitwise_mismatches(a, b):
                return self.failed(
                    ctx,
                    f"output {k} for input B is bitwise the output for input A, though the "
                    "oracle's differ: a stale or cached answer",
                    run_b,
                    [{"output": k, "problem": "stale answer", "identical_to": case_a.label}],
                )
        return None
