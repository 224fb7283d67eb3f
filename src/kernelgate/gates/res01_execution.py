"""RES-01: no exception, crash, hang or device fault in any gate run.

With ``--sanitize`` (device mode) the candidate is also run under compute-sanitizer
memcheck, racecheck and initcheck (``sandbox/sanitizer.py``) on one case at the
reference shape; any error the sanitizer reports fails the gate, with its report.

In CPU mode the Triton interpreter's access trace (``sandbox/access_trace.py``) watches
every load, store and atomic of every gate's calls; an access outside every live
allocation, a write-write race between program instances or a read of poisoned memory no
one wrote fails the gate, with program ids, addresses in elements of the allocation and
the source line of each finding.
"""

from __future__ import annotations

import contextlib
from typing import Any, ClassVar

from kernelgate.gates.base import (
    Counterexample,
    Gate,
    GateAborted,
    GateContext,
    GateKind,
    GateResult,
    Status,
)
from kernelgate.inputs.placement import GUARD_BYTES, POISONS, PlacedTensor
from kernelgate.sandbox.sanitizer import SanitizerRun, sanitize_candidate

SANITIZER_CASE = "reference shape, normal values"


class ExecutionSafetyGate(Gate):
    id: ClassVar[str] = "RES-01"
    kind: ClassVar[GateKind] = GateKind.EXACT
    title: ClassVar[str] = "execution safety"
    always_runs: ClassVar[bool] = True

    def run(self, ctx: GateContext) -> GateResult:
        if ctx.session.device == "cpu":
            self._trace_own_case(ctx)
        sanitizer = (
            ctx.access.summary()
            if ctx.session.device == "cpu"
            else "compute-sanitizer not run: not requested"
        )
        runs: list[SanitizerRun] = []
        if ctx.sanitize:
            runs, sanitizer = self._sanitize(ctx)
            if ctx.session.device == "cpu":  # keep what the trace covered beside it
                sanitizer = f"{sanitizer}; {ctx.access.summary()}"
        evidence = {
            "candidate_calls": ctx.session.calls,
            "worker_starts": ctx.session.starts,
            "incidents": [i.to_dict() for i in ctx.incidents],
            "sanitizer": sanitizer,
            "sanitizer_runs": [r.to_dict() for r in runs],
            "access_trace": ctx.access.to_dict(),
        }
        if ctx.access.findings:
            return self._trace_failure(ctx, evidence)
        found = [r for r in runs if r.found]
        if found and not ctx.incidents:
            return self.result(
                Status.FAIL,
                "compute-sanitizer found errors: "
                + ", ".join(f"{r.tool} {r.errors}" for r in found),
                counterexample=Counterexample(
                    case=f"compute-sanitizer: {SANITIZER_CASE}",
                    seed=ctx.case_seed(self.id, 0),
                    inputs=[],
                    findings=[
                        {"tool": r.tool, "errors": r.errors, "report": r.report[:3000]}
                        for r in found
                    ],
                    replay=ctx.replay(self.id),
                ),
                evidence=evidence,
            )
        if not ctx.incidents:
            return self.passed(
                f"no incident in {ctx.session.calls} candidate calls; {sanitizer}", evidence
            )
        first = ctx.incidents[0]
        kinds = sorted({i.kind for i in ctx.incidents})
        return self.result(
            Status.FAIL,
            f"{len(ctx.incidents)} execution incident(s) ({', '.join(kinds)}); first in "
            f"{first.gate}: {first.kind}: {first.detail}" + (f"; {sanitizer}" if runs else ""),
            counterexample=Counterexample(
                case=f"{first.gate}: {first.case}",
                seed=first.seed,
                inputs=[],
                findings=[i.to_dict() for i in ctx.incidents[:8]],
                replay=ctx.replay(first.gate),
            ),
            evidence=evidence,
        )

    def _trace_own_case(self, ctx: GateContext) -> None:
        """One traced call of RES-01's own (the sanitizer's case) when no gate before it
        made one (``--only RES-01``, or every call so far untraced after a restart)."""
        if ctx.access.traced_calls or ctx.halted or not ctx.session.access_trace:
            return
        case = ctx.drawn_case(SANITIZER_CASE, ctx.case_seed(self.id, 0))
        with contextlib.suppress(GateAborted):  # the incident is recorded for this gate
            ctx.run(self.id, case)

    def _trace_failure(self, ctx: GateContext, evidence: dict[str, Any]) -> GateResult:
        """RES-01 failed by the interpreter's access trace: its findings, the first one's
        call as the case to replay, and any incidents beside them."""
        findings = ctx.access.findings
        first = findings[0]
        kinds = sorted({str(f["kind"]) for f in findings})
        reason = (
            f"access trace: {len(findings)} finding(s) ({', '.join(kinds)}); first in "
            f"{first['gate']}: {ctx.access.describe(first)}"
        )
        if ctx.incidents:
            reason += f"; and {len(ctx.incidents)} execution incident(s)"
        return self.result(
            Status.FAIL,
            reason,
            counterexample=Counterexample(
                case=f"{first['gate']}: {first['case']}",
                seed=int(first["seed"]),
                inputs=[],
                findings=findings[:8] + [i.to_dict() for i in ctx.incidents[:4]],
                replay=ctx.replay(str(first["gate"])),
            ),
            evidence=evidence,
        )

    @staticmethod
    def _sanitize(ctx: GateContext) -> tuple[list[SanitizerRun], str]:
        """Run the sanitizer tools; the summary line says what ran and what it found."""
        if ctx.halted:
            return [], f"compute-sanitizer not run: {ctx.halted}"
        case = ctx.drawn_case(SANITIZER_CASE, ctx.case_seed(ExecutionSafetyGate.id, 0))
        inputs: list[Any] = [
            PlacedTensor.place(v, poison=POISONS[0]).as_wire() if hasattr(v, "shape") else v
            for v in case.values
        ]
        runs, why = sanitize_candidate(
            ctx.session.candidate,
            ctx.session.init_inputs,
            ctx.session.device,
            [inputs],
            poison=POISONS[0],
            guard_bytes=GUARD_BYTES,
            timeout=ctx.session.timeout,
        )
        if why:
            return runs, why
        parts = []
        for r in runs:
            state = "inconclusive (no summary)" if r.errors is None else f"{r.errors} error(s)"
            parts.append(f"{r.tool} {state}")
        return runs, "compute-sanitizer: " + ", ".join(parts)
