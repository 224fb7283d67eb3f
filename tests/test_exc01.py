"""EXC-01's injection densities: scattered specials, and exactly one per tensor and per row."""

from __future__ import annotations

import pytest
import torch

import kernelgate
from kernelgate.formats.kernelbench import load_reference
from kernelgate.gates.exc01_nonfinite import TRIALS
from kernelgate.inputs.specials import Density, inject
from kernelgate.oracle.fp64 import Oracle
from kernelgate.redteam.catalog import ROOT

LINEAR_LSE = ROOT / "references" / "linear_logsumexp.py"


def _special(values: torch.Tensor) -> torch.Tensor:
    return ~torch.isfinite(values)


@pytest.mark.parametrize("kind", ["nan", "+inf", "-inf"])
def test_sparse_densities_inject_exactly_one_per_tensor_and_per_row(kind: str) -> None:
    values = torch.randn(5, 7, 9)
    one = inject(values, kind, seed=3, density=Density.ONE_PER_TENSOR)
    assert int(_special(one).sum()) == 1
    per_row = inject(values, kind, seed=3, density=Density.ONE_PER_ROW)
    assert _special(per_row).sum(dim=-1).eq(1).all()
    # the kind asked for, and nothing else changed
    hit = per_row[_special(per_row)]
    assert (hit.isnan() if kind == "nan" else hit == float(kind.replace("+", ""))).all()
    assert torch.equal(per_row[~_special(per_row)], values[~_special(per_row)])
    # seeded: the same seed puts them at the same positions, another seed elsewhere
    again = inject(values, kind, seed=3, density=Density.ONE_PER_ROW)
    assert torch.equal(_special(again), _special(per_row))
    assert not torch.equal(
        _special(inject(values, kind, seed=4, density=Density.ONE_PER_ROW)), _special(per_row)
    )


def test_sparse_densities_on_vectors_scalars_and_strided_inputs() -> None:
    assert int(_special(inject(torch.randn(11), "nan", 0, Density.ONE_PER_ROW)).sum()) == 1
    assert torch.isinf(inject(torch.tensor(2.0), "+inf", 0, Density.ONE_PER_TENSOR))
    strided = torch.randn(6, 8).t()  # not contiguous: the copy is, rows are its last dim
    out = inject(strided, "-inf", 1, Density.ONE_PER_ROW)
    assert out.shape == strided.shape and _special(out).sum(dim=-1).eq(1).all()
    assert torch.equal(inject(torch.arange(4), "nan", 0, Density.ONE_PER_ROW), torch.arange(4))


def test_every_kind_is_tried_alone_at_both_sparse_densities() -> None:
    for density in (Density.ONE_PER_TENSOR, Density.ONE_PER_ROW):
        assert {k for k, d in TRIALS if d is density} == {"nan", "+inf", "-inf"}


def test_scattered_infinities_hide_an_inf_behind_a_linear_layer_one_per_row_does_not() -> None:
    """The reason for the sparse trials, on the red team's linear -> logsumexp reference:
    scattered +Inf makes the oracle's rows NaN, one +Inf per row keeps them +Inf."""
    program = load_reference(LINEAR_LSE)
    oracle = Oracle(program)
    (x,) = program.inputs(seed=42)
    (scattered,) = oracle.expected([inject(x, "+inf", 5, Density.SCATTERED)])
    (sparse,) = oracle.expected([inject(x, "+inf", 5, Density.ONE_PER_ROW)])
    assert scattered.isnan().all()
    assert (sparse == float("inf")).all()


def test_exc01_rejects_an_unguarded_logsumexp_on_a_sparse_trial_and_passes_its_control() -> None:
    defect = kernelgate.verify(
        LINEAR_LSE, ROOT / "defects" / "unguarded_logsumexp.py", only=["EXC-01"]
    )
    gate = defect.gate("EXC-01")
    assert gate.status == "fail", gate.reason
    assert gate.counterexample is not None
    assert "one-per" in gate.counterexample.case
    assert {f["expected_class"] for f in gate.counterexample.findings} == {"POS_INF"}
    assert {f["actual_class"] for f in gate.counterexample.findings} == {"NAN"}
    control = kernelgate.verify(
        LINEAR_LSE, ROOT / "controls" / "linear_logsumexp.py", only=["EXC-01"]
    )
    passed = control.gate("EXC-01")
    assert passed.status == "pass", passed.reason
    assert len(passed.evidence["trials"]) == len(TRIALS)
    assert "+inf one-per-row" in passed.evidence["trials"]
