"""EXC-01 and EXC-02, rewritten for speed, report exactly what the old code reported.

Frozen copies of the old helpers (``accepted``, the EXC-02 ``_judged``, what they call) and
of both gates' ``run`` are compared with the new code: the helpers on tensors with every
class and both zero signs in fp32/fp16/bf16, the gates end to end on honest and defective
candidates (status, reason, evidence, counterexample).

``float_classes`` and ``sign_bits`` themselves are unchanged; their frozen copies keep
``_old_accepted`` independent of the code under test.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import pytest
import torch

import kernelgate
import kernelgate.pipeline
from kernelgate.contract.spec import FlushPolicy
from kernelgate.gates import exc02_subnormal as exc02
from kernelgate.gates.base import GateContext, GateResult
from kernelgate.gates.exc01_nonfinite import TRIALS, NonFiniteGate
from kernelgate.gates.exc02_subnormal import (
    CASES,
    FloatClass,
    SubnormalGate,
    class_determined,
    subnormal_values,
)
from kernelgate.gates.outputs import structure_findings
from kernelgate.oracle.compare import MAX_POSITIONS, first_positions

from .conftest import DATA, SOFTMAX
from .equivalence import same_bits, same_value
from .test_error_models_equivalence import _old_value_classes, _reference
from .test_exc02 import EXP, HALF, _contract
from .test_specials_equivalence import _old_inject

# ---------------------------------------------------------------- frozen old implementations


def _old_float_classes(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    t = values.detach().cpu().to(dtype)
    magnitude = t.abs()
    classes = torch.full(t.shape, FloatClass.NORMAL, dtype=torch.int8)
    classes[magnitude < torch.finfo(dtype).tiny] = FloatClass.SUBNORMAL
    classes[t == 0] = FloatClass.ZERO
    classes[torch.isinf(t)] = FloatClass.INF
    classes[torch.isnan(t)] = FloatClass.NAN
    return classes


def _old_sign_bits(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return torch.signbit(values.detach().cpu().to(dtype))


def _old_accepted(
    want: torch.Tensor, got: torch.Tensor, dtype: torch.dtype, flush: FlushPolicy
) -> torch.Tensor:
    want_cls, got_cls = _old_float_classes(want, dtype), _old_float_classes(got, dtype)
    same_sign = (_old_sign_bits(want, dtype) == _old_sign_bits(got, dtype)) | (
        want_cls == FloatClass.NAN
    )
    ok = (want_cls == got_cls) & same_sign
    underflow = (want.detach().cpu() != 0) & (want_cls == FloatClass.ZERO)
    ok |= underflow & (got_cls == FloatClass.ZERO)
    if flush is FlushPolicy.FLUSH_ALLOWED:
        ok |= (want_cls == FloatClass.SUBNORMAL) & (got_cls == FloatClass.ZERO) & same_sign
    return ok


def _old_exc02_judged(
    determined: torch.Tensor,
    want: torch.Tensor,
    got_accepted: torch.Tensor,
    runs: dict[str, list[Any]],
    *,
    k: int,
    dtype: torch.dtype,
    flush: FlushPolicy,
) -> tuple[torch.Tensor, torch.Tensor]:
    agree = determined.clone()
    for honest_run in runs.values():
        agree &= _old_accepted(want, honest_run[k], dtype, flush)
    return agree, agree & ~got_accepted


def _old_exc01_judged(
    want_classes: torch.Tensor, got_classes: torch.Tensor, runs: dict[str, list[Any]], *, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    agree = torch.ones(want_classes.shape, dtype=torch.bool)
    for honest_run in runs.values():
        agree &= _old_value_classes(honest_run[k]) == want_classes
    return agree, agree & (got_classes != want_classes)


class _OldNonFiniteGate(NonFiniteGate):
    """EXC-01 as it was: boolean ``.sum()`` counts and the per-element injection loop."""

    def run(self, ctx: GateContext) -> GateResult:
        if not ctx.propagates_specials:
            return self.skipped("the contract's exceptional-value policy promises nothing")
        targets = self._injectable(ctx)
        if not targets:
            return self.skipped("no floating-point input admits NaN or Inf under the contract")
        judged = excluded = consulted = 0
        for index, (kind, whole_row) in enumerate(TRIALS):
            seed = ctx.case_seed(self.id, index)
            case = ctx.drawn_case(f"inject={kind}{' whole-row' if whole_row else ''}", seed)
            case.values = [
                _old_inject(v, kind, seed + 7919 * i, whole_row=whole_row) if i in targets else v
                for i, v in enumerate(case.values)
            ]
            run = ctx.run(self.id, case)
            expected = ctx.expected(case)
            structure = structure_findings(run.outputs, expected, ctx.native(case))
            if structure:
                return self.failed(
                    ctx, "output structure differs from the reference", run, structure
                )
            for k, (want, got) in enumerate(zip(expected, run.outputs)):
                if not isinstance(want, torch.Tensor) or not got.is_floating_point():
                    continue
                want_classes = _old_value_classes(want.to(got.dtype))
                got_classes = _old_value_classes(got)
                agree, bad, asked = ctx.judge_classes(
                    case, functools.partial(_old_exc01_judged, want_classes, got_classes, k=k)
                )
                consulted += asked
                judged += int(agree.sum())
                excluded += int((~agree).sum())
                if bad.any():
                    findings = [
                        self._finding(k, pos, want, got, want_classes, got_classes)
                        for pos in first_positions(bad)[:MAX_POSITIONS]
                    ]
                    return self.failed(
                        ctx,
                        f"{int(bad.sum())} output position(s) of output {k} have the wrong "
                        f"IEEE class on {case.label}",
                        run,
                        findings,
                        {"mismatched_positions": int(bad.sum()), "judged_positions": judged},
                    )
        return self.passed(
            f"non-finite mask and kinds equal the oracle's at {judged} positions over "
            f"{len(TRIALS)} injections",
            {
                "judged_positions": judged,
                "excluded_honest_disagreement": excluded,
                "second_implementation_consulted": consulted,
                "trials": [f"{k}{' whole-row' if w else ''}" for k, w in TRIALS],
            },
        )


class _OldSubnormalGate(SubnormalGate):
    """EXC-02 as it was: the oracle's classes and signs recomputed for every honest run."""

    def run(self, ctx: GateContext) -> GateResult:
        targets = [
            i
            for i, v in enumerate(ctx.template)
            if isinstance(v, torch.Tensor) and v.is_floating_point()
        ]
        if not targets:
            return self.skipped("no floating-point input to feed subnormals or signed zeros")
        flush = ctx.contract.postcondition.flush
        judged = excluded = undetermined = consulted = 0
        per_case: dict[str, dict[str, int]] = {}
        for index, (name, mix) in enumerate(CASES):
            seed = ctx.case_seed(self.id, index)
            case = ctx.drawn_case(name, seed)
            case.values = [
                subnormal_values(tuple(v.shape), v.dtype, seed + 7919 * i, mix, ctx.oracle.device)
                if i in targets
                else v
                for i, v in enumerate(case.values)
            ]
            run = ctx.run(self.id, case)
            expected = ctx.expected(case)
            structure = structure_findings(run.outputs, expected, ctx.native(case))
            if structure:
                return self.failed(
                    ctx, "output structure differs from the reference", run, structure
                )
            case_judged = case_excluded = case_undetermined = 0
            for k, (want, got) in enumerate(zip(expected, run.outputs)):
                if not isinstance(want, torch.Tensor) or not got.is_floating_point():
                    continue
                dtype = got.dtype
                got_accepted = _old_accepted(want, got, dtype, flush)
                determined = class_determined(want, ctx.admissible(case, k, dtype), dtype)
                case_undetermined += int((~determined).sum())
                judge = functools.partial(
                    _old_exc02_judged, determined, want, got_accepted, k=k, dtype=dtype, flush=flush
                )
                agree, bad, asked = ctx.judge_classes(case, judge)
                consulted += asked
                case_judged += int(agree.sum())
                case_excluded += int((determined & ~agree).sum())
                if bad.any():
                    findings = [
                        self._finding(k, pos, want, got, dtype)
                        for pos in first_positions(bad)[:MAX_POSITIONS]
                    ]
                    return self.failed(
                        ctx,
                        f"{int(bad.sum())} output position(s) of output {k} lose the oracle's "
                        f"class or sign on {name} (flush policy {flush.value})",
                        run,
                        findings,
                        {
                            "flush_policy": flush.value,
                            "mismatched_positions": int(bad.sum()),
                            "judged_positions": judged + case_judged,
                            "excluded_honest_disagreement": excluded + case_excluded,
                            "undetermined_positions": undetermined + case_undetermined,
                        },
                    )
            judged += case_judged
            excluded += case_excluded
            undetermined += case_undetermined
            per_case[name] = {
                "judged": case_judged,
                "excluded": case_excluded,
                "undetermined": case_undetermined,
            }
        return self.passed(
            f"class and sign equal the oracle's at {judged} positions over {len(CASES)} "
            f"subnormal / signed-zero cases (flush policy {flush.value})",
            {
                "flush_policy": flush.value,
                "judged_positions": judged,
                "excluded_honest_disagreement": excluded,
                "undetermined_positions": undetermined,
                "second_implementation_consulted": consulted,
                "cases": per_case,
            },
        )


# ------------------------------------------------------------------------ helper-level tests

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SEEDS = [0, 1, 2]


def _values(dtype: torch.dtype, seed: int) -> list[torch.Tensor]:
    """Oracle-like float64 values and outputs: every class, both zero signs, flushes."""
    ref = _reference((48, 37), dtype, seed)
    mixed = subnormal_values((48, 37), dtype, seed, CASES[seed % len(CASES)][1]).double()
    flushed = torch.where(mixed.abs() < torch.finfo(dtype).tiny, 0.0 * mixed, mixed)
    return [ref, mixed, flushed, -mixed, mixed.abs(), ref.to(dtype), flushed.to(dtype)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("flush", list(FlushPolicy))
def test_accepted_and_judged_equal_old(dtype: torch.dtype, seed: int, flush: FlushPolicy) -> None:
    outputs = _values(dtype, seed)
    g = torch.Generator().manual_seed(seed)
    for want in outputs[:5]:
        wanted = exc02.ExpectedClasses.of(want, dtype)
        determined = torch.rand(want.shape, generator=g) < 0.8
        for got in outputs:
            old = _old_accepted(want, got, dtype, flush)
            assert same_bits(old, exc02.accepted(want, got, dtype, flush))
            assert same_bits(old, wanted.accepted(got, flush))
            runs = {"a": [got, outputs[1]], "b": [outputs[0], got.to(dtype)]}
            old_agree, old_bad = _old_exc02_judged(
                determined, want, old, runs, k=0, dtype=dtype, flush=flush
            )
            agree, bad = exc02._judged(determined, wanted, old, runs, k=0, flush=flush)
            assert same_bits(old_agree, agree) and same_bits(old_bad, bad)
            assert int(determined.count_nonzero()) - int(agree.count_nonzero()) == int(
                (determined & ~agree).sum()
            )


# -------------------------------------------------------------------------- gate-level tests


def _verdict_of(monkeypatch: pytest.MonkeyPatch, gate: type, old: type, only: str, *args, **kw):
    """One gate's result with the new code and with the frozen old ``run`` in its place."""
    new_result = kernelgate.verify(*args, only=[only], **kw).gate(only)
    gates = tuple(old if g is gate else g for g in kernelgate.pipeline.GATES)
    monkeypatch.setattr(kernelgate.pipeline, "GATES", gates)
    old_result = kernelgate.verify(*args, only=[only], **kw).gate(only)
    monkeypatch.undo()
    return old_result, new_result


def _assert_same_result(old: GateResult, new: GateResult) -> None:
    old_dict = {k: v for k, v in dataclasses.asdict(old).items() if k != "seconds"}
    new_dict = {k: v for k, v in dataclasses.asdict(new).items() if k != "seconds"}
    assert same_value(old_dict, new_dict), (old_dict, new_dict)


@pytest.mark.parametrize(
    ("reference", "candidate", "flush"),
    [
        (HALF, DATA / "exc02_honest.py", None),
        (HALF, DATA / "exc02_flush.py", None),
        (HALF, DATA / "exc02_sign_loss.py", None),
        (HALF, DATA / "exc02_flush_signed.py", FlushPolicy.PRESERVE),
        (HALF, DATA / "exc02_flush_signed.py", FlushPolicy.FLUSH_ALLOWED),
        (HALF, DATA / "exc02_flush.py", FlushPolicy.FLUSH_ALLOWED),
        (EXP, DATA / "exc02_exp.py", None),
        (SOFTMAX / "reference.py", SOFTMAX / "honest.py", None),
    ],
    ids=lambda p: getattr(p, "stem", None) or str(p),
)
def test_exc02_gate_reports_what_the_old_one_did(
    monkeypatch: pytest.MonkeyPatch, reference, candidate, flush: FlushPolicy | None
) -> None:
    kw = {} if flush is None else {"contract": _contract(reference, flush)}
    old, new = _verdict_of(
        monkeypatch, SubnormalGate, _OldSubnormalGate, "EXC-02", reference, candidate, **kw
    )
    _assert_same_result(old, new)


@pytest.mark.parametrize(
    "candidate",
    [SOFTMAX / "honest.py", SOFTMAX / "nan_swallow.py", DATA / "exc02_honest.py"],
    ids=lambda p: p.stem,
)
def test_exc01_gate_reports_what_the_old_one_did(
    monkeypatch: pytest.MonkeyPatch, candidate
) -> None:
    reference = HALF if candidate.stem.startswith("exc02") else SOFTMAX / "reference.py"
    old, new = _verdict_of(
        monkeypatch, NonFiniteGate, _OldNonFiniteGate, "EXC-01", reference, candidate
    )
    _assert_same_result(old, new)
