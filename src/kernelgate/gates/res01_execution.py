"""RES-01: no exception, crash, hang or device fault in any gate run.

With ``--sanitize``, and by default in device audits for a candidate that launched a kernel
of its own, the candidate is also run under compute-sanitizer memcheck, racecheck,
synccheck and initcheck (``sandbox/sanitizer.py``) on one case: at the reference shape, or
for a reference whose inputs hold over ``SANITIZER_SMALL_ELEMENTS`` elements at the
smallest held-out shape CMP-03 judged correct (``sanitizer_case``). That happens after the
gates and AUTH-01's profile (``sanitize_after_gates``, called by
``verify``), since which kernels are the candidate's is known only then: an error the
sanitizer reports in one of them fails the gate, with the report trimmed to them.

In CPU mode the Triton interpreter's access trace (``sandbox/access_trace.py``) watches
every load, store and atomic of every gate's calls; an access outside every live
allocation, a write-write race between program instances or a read of poisoned memory no
one wrote fails the gate, with program ids, addresses in elements of the allocation and
the source line of each finding.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import Any, ClassVar

from kernelgate.gates.base import (
    Case,
    Counterexample,
    Gate,
    GateAborted,
    GateContext,
    GateKind,
    GateResult,
    Status,
)
from kernelgate.inputs.placement import GUARD_BYTES, POISONS, PlacedTensor
from kernelgate.inputs.shapes import input_elements
from kernelgate.sandbox.sanitizer import (
    KernelNames,
    SanitizePolicy,
    sanitize_candidate,
)

SANITIZER_CASE = "reference shape, normal values"
# Above this many input elements at the reference shape the sanitizer runs the smallest
# held-out shape CMP-03 passed instead: a tool's cost grows with the memory a call touches,
# and at KernelBench's sizes initcheck ran past its 75 s share on every CUDA-L1 h100 record
# with authored kernels (an H100, 2026-12-05), so it judged none of them.
SANITIZER_SMALL_ELEMENTS = 1 << 22


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
        evidence = {
            "candidate_calls": ctx.session.calls,
            "worker_starts": ctx.session.starts,
            "incidents": [i.to_dict() for i in ctx.incidents],
            "sanitizer": sanitizer,
            "sanitizer_runs": [],  # sanitize_after_gates fills them in
            "access_trace": ctx.access.to_dict(),
        }
        if ctx.access.findings:
            return self._trace_failure(ctx, evidence)
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


def sanitizer_case(ctx: GateContext, shapes: list[dict[str, Any]] | None) -> Case:
    """The one case the sanitizer runs: the reference shape, unless its inputs hold over
    ``SANITIZER_SMALL_ELEMENTS`` elements and CMP-03 (``shapes``: its evidence's records)
    judged a smaller held-out shape correct that leaves the model as it is (new init inputs
    would need a model the main session's weights do not fit). A shape the candidate
    got right is one where its kernels ran as meant, not one it fails on for other reasons.
    """
    seed = ctx.case_seed(ExecutionSafetyGate.id, 0)
    full = input_elements(ctx.contract, {})
    smaller = [
        (r["input_elements"], str(r["label"]), str(r["dim"]), int(r["value"]))
        for r in shapes or ()
        if r.get("status") == "pass"
        and not r.get("rebuilt_model")
        and isinstance(r.get("input_elements"), int)
        and r["input_elements"] < full
    ]
    if full > SANITIZER_SMALL_ELEMENTS and smaller:
        _, label, dim, value = min(smaller)
        with contextlib.suppress(Exception):  # the reference ran there once already
            case = ctx.sized_case(f"{label}, normal values", seed, {dim: value})
            if case.init_inputs is None:
                return case
    return ctx.drawn_case(SANITIZER_CASE, seed)


def sanitize_after_gates(
    result: GateResult,
    ctx: GateContext,
    policy: SanitizePolicy,
    authorship: dict[str, Any],
    shapes: list[dict[str, Any]] | None = None,
) -> GateResult:
    """RES-01's result with the sanitizer's runs added, and failed by their findings.

    Runs after the gates and AUTH-01's profile (``authorship``: the verdict's evidence),
    whose kernels say which are the candidate's: under ``policy.when == "authored"`` a
    candidate with none of its own is not sanitized (the evidence says why), and every
    report is attributed and trimmed by them (``attribute_report``). The sanitized workers
    are fresh processes sharing the main session's scratch (its builds): the main instance
    is not called again. A pure function of its inputs and the runs, so a resumed
    verification (the gate journal holds RES-01 without them) gets the same result.
    ``shapes``: CMP-03's shape records, from which ``sanitizer_case`` may take a smaller case.
    """
    evidence = dict(result.evidence)
    kernels = KernelNames.from_authorship(authorship)
    evidence["sanitizer_policy"] = {"when": policy.when, "seconds": policy.seconds}
    evidence["sanitizer_eligible"] = bool(kernels.authored) or policy.when == "always"
    why = None
    if ctx.session.device == "cpu":
        why = "CPU mode (it needs a CUDA device)"
    elif not evidence["sanitizer_eligible"]:
        why = (
            "no kernel of the candidate's own launched (AUTH-01's profile)"
            if authorship.get("authored_share") is not None
            else f"which kernels are the candidate's is unknown: {authorship.get('why')}"
        )
    elif ctx.halted:
        why = ctx.halted
    if why is not None:
        evidence["sanitizer"] = f"compute-sanitizer not run: {why}"
        if ctx.session.device == "cpu":  # keep what the trace covered beside it
            evidence["sanitizer"] += f"; {ctx.access.summary()}"
        return dataclasses.replace(result, evidence=evidence)
    case = sanitizer_case(ctx, shapes)
    evidence["sanitizer_case"] = case.label
    inputs: list[Any] = [
        PlacedTensor.place(v, poison=POISONS[0]).as_wire() if hasattr(v, "shape") else v
        for v in case.values
    ]
    started = time.monotonic()
    runs, not_run = sanitize_candidate(
        ctx.session.candidate,
        ctx.session.init_inputs,
        ctx.session.device,
        [inputs],
        poison=POISONS[0],
        guard_bytes=GUARD_BYTES,
        timeout=ctx.session.timeout,
        tools=policy.tools,
        budget_s=policy.seconds,
        kernels=kernels if kernels.authored else None,
        like=ctx.session,
    )
    evidence["sanitizer_seconds"] = round(time.monotonic() - started, 2)
    evidence["sanitizer_runs"] = [r.to_dict() for r in runs]
    evidence["sanitizer"] = not_run or "compute-sanitizer: " + ", ".join(
        f"{r.tool} {r.status}"
        + (f" ({r.candidate_errors} in the candidate's kernels)" if r.found else "")
        + (f" ({r.other_errors} outside the candidate's kernels)" if r.other_errors else "")
        for r in runs
    )
    found = [r for r in runs if r.found]
    if result.status is Status.PASS and found:
        replay = ctx.replay(ExecutionSafetyGate.id)
        if "--sanitize" not in replay.split():
            replay += " --sanitize"
        return dataclasses.replace(
            result,
            status=Status.FAIL,
            reason="compute-sanitizer found errors in the candidate's kernels: "
            + ", ".join(f"{r.tool} {r.candidate_errors}" for r in found),
            counterexample=Counterexample(
                case=f"compute-sanitizer: {case.label}",
                seed=ctx.case_seed(ExecutionSafetyGate.id, 0),
                inputs=[],
                findings=[
                    {"tool": r.tool, "errors": r.candidate_errors, "report": r.report[:3000]}
                    for r in found
                ],
                replay=replay,
            ),
            evidence=evidence,
        )
    reason = result.reason
    if result.status is Status.PASS:
        reason = f"no incident in {ctx.session.calls} candidate calls; {evidence['sanitizer']}"
    elif runs:
        reason = f"{reason}; {evidence['sanitizer']}"
    return dataclasses.replace(result, reason=reason, evidence=evidence)
