"""RES-01: no exception, crash, hang or device fault in any gate run."""

from __future__ import annotations

from typing import ClassVar

from kernelgate.gates.base import Counterexample, Gate, GateContext, GateKind, GateResult, Status


class ExecutionSafetyGate(Gate):
    id: ClassVar[str] = "RES-01"
    kind: ClassVar[GateKind] = GateKind.EXACT
    title: ClassVar[str] = "execution safety"
    always_runs: ClassVar[bool] = True

    def run(self, ctx: GateContext) -> GateResult:
        sanitizer = (
            "compute-sanitizer not run: CPU mode (the interpreter access trace is "
            "not implemented yet)"
            if ctx.session.device == "cpu"
            else "compute-sanitizer not run: not requested"
        )
        evidence = {
            "candidate_calls": ctx.session.calls,
            "worker_starts": ctx.session.starts,
            "incidents": [i.to_dict() for i in ctx.incidents],
            "sanitizer": sanitizer,
        }
        if not ctx.incidents:
            return self.passed(
                f"no incident in {ctx.session.calls} candidate calls; {sanitizer}", evidence
            )
        first = ctx.incidents[0]
        kinds = sorted({i.kind for i in ctx.incidents})
        return self.result(
            Status.FAIL,
            f"{len(ctx.incidents)} execution incident(s) ({', '.join(kinds)}); first in "
            f"{first.gate}: {first.kind}: {first.detail}",
            counterexample=Counterexample(
                case=f"{first.gate}: {first.case}",
                seed=first.seed,
                inputs=[],
                findings=[i.to_dict() for i in ctx.incidents[:8]],
                replay=ctx.replay(first.gate),
            ),
            evidence=evidence,
        )
