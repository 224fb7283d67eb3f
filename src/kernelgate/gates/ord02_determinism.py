"""ORD-02: bitwise identical outputs across repeats, new addresses, interleaved inputs and
fresh instances of the candidate; earlier outputs left as they were returned."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, ClassVar

import torch

from kernelgate.gates.base import (
    Case,
    Gate,
    GateAborted,
    GateContext,
    GateKind,
    GateResult,
    Incident,
    Run,
)
from kernelgate.oracle.compare import (
    bitwise_mismatches,
    first_output_difference,
    rounding_device,
)
from kernelgate.oracle.fp64 import flatten_outputs
from kernelgate.sandbox.session import ExecutionIncident
from kernelgate.sandbox.wire import WireTensor

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
# Fresh instances judged on their first call: the main instance (its first call, kept by
# ``GateContext.first_call``, is input A) and at least one new worker process, two new ones
# where the main instance's first call was not kept (placed otherwise, or too large to hold).
FRESH_INSTANCES = 2

# Calls whose outputs the worker keeps alive, as a caller holding its results would, each
# mapped to the last call it is held through (its outputs are re-read after every later call
# up to that one). The first call of each input is kept; so is call 1, whose input storages
# call 2 writes its inputs into: a caller reusing its buffers must not change a result it
# holds (an output computed only when it is read, or a view of its inputs). Call 0 is let go
# once call 1 has been judged against it, so that at most two outputs are held at once, as
# before call 1 was kept. Contracts with inputs written in place keep no call whose inputs a
# later call overwrites: there an output may be a view of its input (``kept_windows``).
KEPT_WINDOWS = {0: 1, 1: len(SEQUENCE) - 1, 2: len(SEQUENCE) - 1}
KEPT_WINDOWS_IN_PLACE = {0: len(SEQUENCE) - 1, 2: len(SEQUENCE) - 1}


def kept_windows(in_place: bool) -> dict[int, int]:
    """Which calls' outputs are kept, and through which call (see ``KEPT_WINDOWS``)."""
    return dict(KEPT_WINDOWS_IN_PLACE if in_place else KEPT_WINDOWS)


def inputs_written_over(call: int) -> int | None:
    """The earlier call whose input storages ``call`` writes its inputs into, or None."""
    return call - 1 if call > 0 and SEQUENCE[call][2] else None


class DeterminismGate(Gate):
    id: ClassVar[str] = "ORD-02"
    kind: ClassVar[GateKind] = GateKind.EXACT
    title: ClassVar[str] = "determinism and no stale state"

    def run(self, ctx: GateContext) -> GateResult:
        ctx.prefetch_instance()  # the first fresh instance starts up beside the main calls
        # input A is the main worker's first call where it was kept (drawn only otherwise):
        # the same case, so its oracle results from that gate are found again
        main_first = ctx.first_call
        cases = {
            name: ctx.drawn_case(f"input {name}", ctx.case_seed(self.id, i))
            for i, name in enumerate("AB")
            if name == "B" or main_first is None
        }
        if main_first is not None:
            cases["A"] = main_first.case
        first: dict[str, Run] = {}
        kept: dict[int, Run] = {}
        windows = kept_windows(bool(ctx.contract.postcondition.in_place))
        try:
            for call, (name, hold, reuse) in enumerate(SEQUENCE):
                with self._keeping(ctx, call, windows):
                    run = ctx.run(self.id, cases[name], hold_bytes=hold, reuse_inputs=reuse)
                reused = self._reused_outputs(ctx, call, run, kept)
                if reused is not None:
                    return reused
                if call in windows:
                    kept[call] = run
                self._let_go(ctx, run.case, kept, windows, call)
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
        finally:
            self._release_kept(ctx, cases["A"])
        stale = self._stale(ctx, cases["A"], cases["B"], first["A"], first["B"])
        if stale is not None:
            return stale
        evidence: dict[str, Any] = {
            "sequence": [n for n, _, _ in SEQUENCE],
            "hold_bytes": [h for _, h, _ in SEQUENCE],
            "at_previous_addresses": [r for _, _, r in SEQUENCE],
            "kept_calls": {str(c): f"through call {last}" for c, last in windows.items()},
        }
        fresh = self._fresh_instances(ctx, cases["A"], first["A"], main_first, evidence)
        if fresh is not None:
            return fresh
        return self.passed(
            f"{len(SEQUENCE)} calls (repeats at new addresses, interleaved inputs) and the first "
            f"calls of {FRESH_INSTANCES} fresh instances bitwise stable; earlier outputs "
            "unchanged by later calls, no storage returned twice",
            evidence,
        )

    # -- outputs reused across calls ------------------------------------------------------
    @staticmethod
    @contextlib.contextmanager
    def _keeping(ctx: GateContext, call: int, windows: dict[int, int]) -> Iterator[None]:
        """The worker keeps this call's outputs alive, as a caller holding them would."""
        if call not in windows:
            yield
            return
        with ctx.session.keeping_outputs(f"call {call}"):
            yield

    def _reused_outputs(
        self, ctx: GateContext, call: int, run: Run, kept: dict[int, Run]
    ) -> GateResult | None:
        """A result the caller still holds must stay as it was returned.

        A candidate that returns storage it keeps (a replayed CUDA graph's static output, an
        output buffer allocated once) changes the caller's earlier result with its next
        call, though each answer is right as it is returned. Two signs, both judged from
        what the worker's own code reads: a later output whose storage overlaps a kept
        output's (reuse even where the bytes happen to agree), and a kept output whose bytes
        are no longer those it was returned with.
        """
        if not kept:
            return None
        evidence = {"sequence": [n for n, _, _ in SEQUENCE], "kept_calls": sorted(kept)}
        shared = _shared_storages(call, run, kept)
        if shared:
            f = shared[0]
            return self.failed(
                ctx,
                f"output {f['output']} of call {call} shares storage with output "
                f"{f['kept_output']} of call {f['kept_call']}, which the caller still holds: "
                "the candidate returns storage it reuses",
                run,
                shared,
                evidence,
            )
        names = {earlier: f"call {earlier}" for earlier in kept}
        now = self._kept_now(ctx, run.case, list(names.values()))
        for earlier, held in kept.items():
            current = flatten_outputs(now[names[earlier]])
            current = [o.view() if isinstance(o, WireTensor) else o for o in current]
            labels = (f"returned_by_call_{earlier}", f"after_call_{call}")
            changed = _changed(held.outputs, current, labels)
            if changed is not None:
                k, findings = changed
                for finding in findings:
                    finding |= {"changed_call": earlier, "after_call": call}
                why = "the candidate reuses storage it returned"
                if inputs_written_over(call) == earlier:
                    why = (
                        f"call {call} wrote its inputs into call {earlier}'s input buffers first, "
                        "as a caller reusing them would, so the output depends on its inputs "
                        "after it was returned (computed when read, or a view of them), or " + why
                    )
                return self.failed(
                    ctx,
                    f"output {k} of call {earlier} changed after call {call}: {why}",
                    run,
                    findings,
                    evidence,
                )
        return None

    def _let_go(
        self, ctx: GateContext, case: Case, kept: dict[int, Run], windows: dict[int, int], call: int
    ) -> None:
        """Forget the kept outputs whose window ends with ``call`` (here and in the worker)."""
        if call == len(SEQUENCE) - 1:
            return  # the gate's end lets every kept output go (``_release_kept``)
        ended = [earlier for earlier in kept if windows[earlier] == call]
        if not ended:
            return
        for earlier in ended:
            del kept[earlier]
        try:
            ctx.session.forget_kept([f"call {earlier}" for earlier in ended])
        except ExecutionIncident as incident:
            _record(ctx, self.id, case, incident)
            raise GateAborted(str(incident)) from None

    def _kept_now(self, ctx: GateContext, case: Case, names: list[str]) -> dict[str, Any]:
        """The kept outputs as they are now; misbehaviour aborts the gate (RES-01)."""
        try:
            return ctx.session.kept_outputs(names)
        except ExecutionIncident as incident:
            _record(ctx, self.id, case, incident)
            raise GateAborted(str(incident)) from None

    def _release_kept(self, ctx: GateContext, case: Case) -> None:
        """Let the kept outputs go, however the gate ended. A misbehaving worker is an
        incident for RES-01; the gate's own result stands."""
        try:
            ctx.session.release_kept()
        except ExecutionIncident as incident:
            _record(ctx, self.id, case, incident)

    def _stale(self, ctx: GateContext, case_a, case_b, run_a: Run, run_b: Run) -> GateResult | None:
        """Different inputs whose oracle outputs differ must not give identical outputs."""
        for k, (a, b) in enumerate(zip(run_a.outputs, run_b.outputs)):
            if not isinstance(a, torch.Tensor) or a.shape != b.shape:
                continue
            # rounded where the oracle's results are kept when that device rounds as the
            # CPU does, else on the CPU (``compare.rounding_device``)
            want_a, want_b = ctx.expected(case_a)[k], ctx.expected(case_b)[k]
            device = rounding_device(want_a, a.dtype)
            want_a, want_b = want_a.to(device).to(a.dtype), want_b.to(device).to(a.dtype)
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
        self,
        ctx: GateContext,
        case_a: Case,
        main_a: Run,
        main_first: Run | None,
        evidence: dict[str, Any],
    ) -> GateResult | None:
        """Fresh instances whose first call is ``case_a``, bitwise equal to the main
        instance's later output for it and to each other.

        Catches state a candidate sets up on its first call (a first call that takes
        another path or summation order than later ones) and per-instance randomness
        (unseeded draws, address- or time-dependent choices). The main instance counts as
        one where its own first call was ``case_a`` (``main_first``): then one new worker
        process suffices, else two are started. Their clocks are real, as a user's new
        process has them; the choice points each reports are in the evidence.
        """
        records: list[dict[str, Any]] = []
        evidence["fresh_instances"] = records
        earlier: list[tuple[str, Run]] = [("main_instance", main_a)]
        if main_first is not None:
            points = ctx.choice_points(self.id)
            records.append(
                {
                    "instance": "main_instance",
                    "first_call": case_a.label,
                    "choice_points": [p.to_dict() for p in points],
                }
            )
            failed = self._first_call_differs(
                ctx, "main_instance_first_call", main_first, earlier, points
            )
            if failed is not None:
                failed.evidence = evidence
                return failed
            earlier.insert(0, ("main_instance_first_call", main_first))
        started = FRESH_INSTANCES - (main_first is not None)
        for number in range(1, started + 1):
            more = number < started
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
            failed = self._first_call_differs(ctx, name, run, earlier, points)
            if failed is not None:
                failed.evidence = evidence
                return failed
            earlier.append((name, run))
        return None

    def _first_call_differs(
        self,
        ctx: GateContext,
        name: str,
        run: Run,
        earlier: list[tuple[str, Run]],
        points: list[Any],
    ) -> GateResult | None:
        """The failure when ``run`` (``name``'s first call) differs bitwise from an earlier
        answer to the same input, else None."""
        for other, other_run in earlier:
            difference = first_output_difference(other_run.outputs, run.outputs, (other, name))
            if difference is None:
                continue
            k, findings = difference
            chosen = "; ".join(p.describe() for p in points[:6])
            timing = f" (its timing-dependent choices: {chosen})" if chosen else ""
            what = (
                "the main instance's first call"
                if name == "main_instance_first_call"
                else "a fresh instance's first call"
            )
            return self.failed(
                ctx,
                f"output {k} of {what} on {run.case.label} differs bitwise from the "
                f"{other.replace('_', ' ')}'s{timing}: state set up on a first call, or a "
                "result that differs from process to process",
                run,
                findings,
            )
        return None


def _shared_storages(call: int, run: Run, kept: dict[int, Run]) -> list[dict[str, Any]]:
    """Outputs of ``run`` whose storage overlaps that of a kept earlier output.

    Kept outputs are alive in the worker, so no allocator can hand out their memory again:
    an overlap is storage the candidate itself handed out twice.
    """
    findings = []
    for k, out in enumerate(run.raw_outputs):
        if not isinstance(out, WireTensor) or out.nbytes == 0:
            continue
        for earlier, held_run in kept.items():
            for m, held in enumerate(held_run.raw_outputs):
                if not isinstance(held, WireTensor) or held.nbytes == 0:
                    continue
                if out.address < held.address + held.nbytes and held.address < (
                    out.address + out.nbytes
                ):
                    findings.append(
                        {
                            "problem": "storage returned again while the caller holds it",
                            "output": k,
                            "call": call,
                            "storage": {"address": hex(out.address), "nbytes": out.nbytes},
                            "kept_call": earlier,
                            "kept_output": m,
                            "kept_storage": {"address": hex(held.address), "nbytes": held.nbytes},
                        }
                    )
    return findings


def _changed(
    then: list[Any], now: list[Any], labels: tuple[str, str]
) -> tuple[int, list[dict[str, Any]]] | None:
    """The first output whose kind, shape, dtype or bytes differ between ``then`` and
    ``now``, with its findings (positions and both values where only bytes differ)."""
    if len(then) != len(now):
        return 0, [{"problem": f"{len(then)} outputs returned, {len(now)} held now"}]
    for k, (a, b) in enumerate(zip(then, now)):
        if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
            return k, [{"output": k, "problem": "kind changed"}]
        if not isinstance(a, torch.Tensor) and a != b and not (a != a and b != b):
            return k, [{"output": k, "problem": "value changed", labels[0]: a, labels[1]: b}]
    return first_output_difference(then, now, labels)


def _record(ctx: GateContext, gate_id: str, case: Case, incident: ExecutionIncident) -> None:
    """An incident in a worker operation of this gate, recorded as ``GateContext.run`` does."""
    ctx.incidents.append(
        Incident(
            gate_id,
            case.label,
            case.seed,
            incident.kind,
            incident.detail,
            incident.log_tail[-2000:],
        )
    )
    if incident.kind == "timeout":
        ctx.halted = f"worker hung in {gate_id} ({case.label})"
