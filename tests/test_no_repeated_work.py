"""No repeated work in a verification (issue 19): each distinct case's oracle results are
computed once across gates, the magnitude run only for error models that read it, honest
runs only when the bound is in question, and each case's inputs drawn once."""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

import pytest
import torch

from kernelgate.contract.derive import contract_for
from kernelgate.formats.kernelbench import load_reference
from kernelgate.gates import base
from kernelgate.gates.base import GateContext
from kernelgate.oracle.error_models import assess_with, uses_magnitude
from kernelgate.oracle.fp64 import Oracle
from kernelgate.pipeline import verify
from kernelgate.redteam.catalog import ROOT as REDTEAM

from .conftest import SOFTMAX

RELU = REDTEAM / "references" / "relu.py"


def _context(reference) -> GateContext:
    """A context without a worker: the oracle side of a verification only."""
    program = load_reference(reference)
    return GateContext(
        contract=contract_for(program), oracle=Oracle(program), session=None, seed=0, replay=[]
    )


def test_error_models_say_whether_they_read_the_magnitude() -> None:
    assert not uses_magnitude("ensemble", {"entry": "x"})
    assert not uses_magnitude("elementwise", {"entry": "relu", "magnitude": "output"})
    assert not uses_magnitude("elementwise", {"entry": "relu"})
    assert uses_magnitude("elementwise", {"entry": "gelu", "magnitude": "input-abs"})
    assert uses_magnitude("order", {"entry": "softmax", "magnitude": "softmax-arguments"})


def test_magnitude_run_skipped_where_the_error_model_does_not_read_it() -> None:
    """ReLU's elementwise model measures errors against |ref|: its magnitude run (as costly
    as the oracle) is never made; softmax's order model reads it, once per case."""
    relu = _context(RELU)
    assert relu.contract.postcondition.error_model.params["magnitude"] == "output"
    case = relu.drawn_case("normal", 1)
    exact = relu.expected(case)[0].float()
    assert relu.assess(case, 0, exact).passed
    assert relu.magnitude(case) == ([], 1)
    assert relu.evaluations["magnitude"] == 0

    softmax = _context(SOFTMAX / "reference.py")
    assert softmax.contract.postcondition.error_model.name == "order"
    case = softmax.drawn_case("normal", 1)
    exact = softmax.expected(case)[0].float()
    assert softmax.assess(case, 0, exact).passed
    assert softmax.assess(case, 0, exact).passed
    assert softmax.evaluations["magnitude"] == 1


def test_honest_runs_only_when_the_bound_is_in_question() -> None:
    """A passing output needs no honest run (they only exclude positions and raise the
    bound); a failing one gets it, and is judged exactly as with it from the start."""
    ctx = _context(SOFTMAX / "reference.py")
    case = ctx.drawn_case("normal", 3)
    exact = ctx.expected(case)[0].float()
    passed = ctx.assess(case, 0, exact)
    assert passed.passed and passed.params["honest_runs"].startswith("not run")
    assert ctx.evaluations["honest:native-eager"] == 0

    wrong = exact.clone()
    wrong[0, 0] *= 1.01
    failed = ctx.assess(case, 0, wrong)
    assert not failed.passed
    assert ctx.evaluations["honest:native-eager"] == 1
    spec = ctx.contract.postcondition.error_model
    magnitudes, n = ctx.magnitude(case)
    direct = assess_with(
        spec.name,
        spec.params,
        ctx.expected(case)[0],
        wrong,
        {"native-eager": ctx.native(case)[0]},
        magnitude=magnitudes[0],
        n=n,
    )
    assert failed.worst_ratio == direct.worst_ratio and failed.params == direct.params
    # the output dtypes come from that one native run: no second one for the signature
    assert ctx.output_dtypes(case) == [torch.float32]
    other = ctx.drawn_case("normal", 4)
    assert ctx.output_dtypes(other) == [torch.float32]
    assert ctx.evaluations["honest:native-eager"] == 1


def test_oracle_results_kept_across_gates_by_values_not_by_label() -> None:
    """A case judged again in a later gate (the same admitted values) is not evaluated
    again; a case whose values a gate replaced is; above the byte budget nothing is carried
    from gate to gate."""
    ctx = _context(RELU)
    case = ctx.drawn_case("normal", 1)
    first = ctx.expected(case)
    ctx.forget_cases()  # the next gate
    assert ctx.expected(case) is first
    assert ctx.evaluations["expected"] == 1

    case.values = [v.neg() for v in case.values]  # same label and seed, other values
    assert torch.equal(ctx.expected(case)[0], torch.relu(case.values[0].double()))
    assert ctx.evaluations["expected"] == 2

    budget = base.RESULTS_KEPT_BYTES
    try:
        base.RESULTS_KEPT_BYTES = 0
        ctx.forget_cases()
        ctx.expected(case)
        assert ctx.evaluations["expected"] == 3
        assert len(ctx._results) == 1  # the current case stays within its gate
    finally:
        base.RESULTS_KEPT_BYTES = budget


def _digest(values: list[Any]) -> str:
    h = hashlib.sha256()
    for v in values:
        if isinstance(v, torch.Tensor):
            h.update(repr((tuple(v.shape), v.dtype)).encode())
            h.update(v.detach().contiguous().view(torch.uint8).numpy().tobytes())
        else:
            h.update(repr(v).encode())
    return h.hexdigest()


@pytest.mark.slow
def test_a_case_two_gates_share_is_evaluated_once(monkeypatch) -> None:
    """ORD-02 judges the main worker's first call, CMP-01's first case: through both gates
    each distinct input is evaluated once by the oracle and drawn once; ReLU's elementwise
    model makes no magnitude run, and a passing candidate no honest run outside the first
    of its input signature."""
    evaluated: Counter[tuple[str, str]] = Counter()
    for name in ("expected", "honest_run", "magnitude"):
        original = getattr(Oracle, name)

        def counted(self, inputs, *args, _name=name, _original=original, **kwargs):
            evaluated[(_name, _digest(inputs))] += 1
            return _original(self, inputs, *args, **kwargs)

        monkeypatch.setattr(Oracle, name, counted)
    drawn: Counter[tuple[Any, ...]] = Counter()
    draw = base.draw

    def counted_draw(distribution, seed, shape, dtype, device):
        drawn[(distribution, seed, shape, dtype)] += 1
        return draw(distribution, seed, shape, dtype, device)

    monkeypatch.setattr(base, "draw", counted_draw)
    verdict = verify(RELU, REDTEAM / "controls" / "relu.py", only=["CMP-01", "ORD-02"])
    statuses = {g.id: g.status for g in verdict.gates}
    assert statuses["CMP-01"] == "pass" and statuses["ORD-02"] == "pass"
    assert evaluated and max(evaluated.values()) == 1, evaluated
    assert drawn and max(drawn.values()) == 1, drawn
    kinds = Counter(kind for kind, _ in evaluated)
    assert kinds["magnitude"] == 0
    assert kinds["honest_run"] == 1  # CMP-01's first case: the output dtypes
    # ORD-02's own input B is new; its input A is CMP-01's first case, not evaluated again
    assert kinds["expected"] == len({d for k, d in evaluated if k == "expected"})
