"""ORD-02: bitwise identical outputs across repeats, new addresses, interleaved inputs and
fresh instances of the candidate."""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from kernelgate.gates.base import Case, Gate, GateContext, GateKind, GateResult, Run
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
# Fresh instances (new worker processes) whose first call is input A: a candidate's first
# call is otherwise judged only by CMP-01, whose cases come first in the main instance.
FRESH_INSTANCES = 2


class DeterminismGate(Gate):
    id: ClassVar[str] = "ORD-02"
    kind: ClassVar[GateKind] = GateKind.EXACT
    title: ClassVar[str] = "determinism and no stale state"

    def run(self, ctx: GateContext) -> GateResult:
        ctx.prefetch_instance()  # the first fresh instance starts up beside the main calls
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
        evidence: dict[str, Any] = {
            "sequence": [n for n, _, _ in SEQUENCE],
            "hold_bytes": [h for _, h, _ in SEQUENCE],
            "at_previous_addresses": [r for _, _, r in SEQUENCE],
        }
        fresh = self._fresh_instances(ctx, cases["A"], first["A"], evidence)
        if fresh is not None:
            return fresh
        return self.passed(
            f"{len(SEQUENCE)} calls (repeats at new addresses, interleaved inputs) and the first "
            f"calls of {FRESH_INSTANCES} fresh instances bitwise stable",
            evidence,
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

    def _fresh_instances(
        self, ctx: GateContext, case_a: Case, main_a: Run, evidence: dict[str, Any]
    ) -> GateResult | None:
        """Fresh instances whose first call is ``case_a``, bitwise equal to the main
        instance's output for it and to each other.

        Catches state a candidate sets up on its first call (a first call that takes
        another path or summation order than later ones) and per-instance randomness
        (unseeded draws, address- or time-dependent choices). Their clocks are real, as a
        user's new process has them; the choice points each reports are in the evidence.
        """
        records: list[dict[str, Any]] = []
        evidence["fresh_instances"] = records
        earlier: list[tuple[str, Run]] = [("main_instance", main_a)]
        for number in range(1, FRESH_INSTANCES + 1):
            more = number < FRESH_INSTANCES
            with ctx.fresh_instance(self.id, "real", prefetch=more) as session:
                run = ctx.run(self.id, case_a, session=session)
                points = ctx.choice_points(self.id, session)
            name = f"fresh_instance_{number}"
            records.append(
                {
                    "instance": name,
                    "first_call": case_a.label,
                    "choice_points": [p.to_dict() for p in points],
                }
            )
            for other, other_run in earlier:
                difference = first_output_difference(other_run.outputs, run.outputs, (other, name))
                if difference is None:
                    continue
                k, findings = difference
                chosen = "; ".join(p.describe() for p in points[:6])
                timing = f" (its timing-dependent choices: {chosen})" if chosen else ""
                return self.failed(
                    ctx,
                    f"output {k} of a fresh instance's first call on {case_a.label} differs "
                    f"bitwise from the {other.replace('_', ' ')}'s{timing}: state set up on "
                    "a first call, or a result that differs from process to process",
                    run,
                    findings,
                    evidence,
                )
            earlier.append((name, run))
        return None
