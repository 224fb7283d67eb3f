"""Outputs judged by their kind (issue 20, part 3): integers exactly, indices by equivalence.

Candidates are plain PyTorch (the interpreter is slow): what is judged here is the judge.
"""

from __future__ import annotations

import pytest
import torch

import kernelgate
from kernelgate.contract.derive import derive_contract
from kernelgate.contract.spec import IndexOrder, IndexOutput, OutputKind, OutputSpec
from kernelgate.formats.kernelbench import load_reference
from kernelgate.gates.base import Status
from kernelgate.oracle.output_kinds import assess_exact, assess_indices, output_kind

from .conftest import DATA

TOPK = DATA / "idx_topk_reference.py"
ARGMAX = DATA / "idx_argmax_reference.py"
SORT = DATA / "idx_sort_stable_reference.py"
ROWSUM = DATA / "int_rowsum_reference.py"


def _cmp01(reference: object, candidate: str) -> kernelgate.Verdict:
    return kernelgate.verify(reference, DATA / candidate, only=["CMP-01"])


def test_the_contract_records_index_outputs_from_the_op_that_made_them() -> None:
    topk = derive_contract(load_reference(TOPK)).outputs
    assert [o.kind for o in topk] == [OutputKind.VALUES, OutputKind.INDICES]
    assert topk[1].indices == IndexOutput("aten::topk", 0, -1, IndexOrder.VALUES, True)
    argmax = derive_contract(load_reference(ARGMAX)).outputs[0]
    assert argmax.indices == IndexOutput("aten::argmax", 0, 1, IndexOrder.VALUES, False)
    ordered = derive_contract(load_reference(SORT)).outputs[1]
    assert ordered.indices == IndexOutput("aten::sort.stable", 0, -1, IndexOrder.STABLE, True)
    assert derive_contract(load_reference(ROWSUM)).outputs[0].kind is OutputKind.EXACT


def test_topk_with_ties_broken_the_other_way_is_verified() -> None:
    x = torch.randint(0, 4, (16, 64)).float()  # the reference's kind of input: ties
    theirs = torch.topk(x.flip(-1), 8, dim=-1).indices
    assert not torch.equal(64 - 1 - theirs, torch.topk(x, 8, dim=-1).indices)  # other indices
    verdict = _cmp01(TOPK, "idx_topk_other_ties.py")
    assert verdict.verdict.value == "verified", verdict.gate("CMP-01").reason


def test_topk_with_right_values_and_wrong_indices_is_rejected_naming_the_index() -> None:
    gate = _cmp01(TOPK, "idx_topk_wrong_indices.py").gate("CMP-01")
    assert gate.status is Status.FAIL
    assert "output 1" in gate.reason and "not the oracle's value" in gate.reason
    finding = gate.counterexample.findings[0]
    assert finding["index"] == (finding["oracle_index"] + 1) % 64
    assert finding["value_at_index"] != finding["oracle_value"]


def test_argmax_with_ties_accepts_any_maximum_and_rejects_the_argmin() -> None:
    assert _cmp01(ARGMAX, "idx_argmax_last.py").verdict.value == "verified"
    gate = _cmp01(ARGMAX, "idx_argmax_wrong.py").gate("CMP-01")
    assert gate.status is Status.FAIL and gate.counterexample.findings[0]["index"] is not None


def test_a_stable_sort_requires_the_stable_order_of_ties() -> None:
    assert _cmp01(SORT, "idx_sort_stable_honest.py").verdict.value == "verified"
    gate = _cmp01(SORT, "idx_sort_unstable.py").gate("CMP-01")
    assert gate.status is Status.FAIL
    assert "stable order" in gate.reason


def test_an_integer_output_off_by_one_is_rejected_exactly() -> None:
    assert _cmp01(ROWSUM, "int_rowsum_honest.py").verdict.value == "verified"
    gate = _cmp01(ROWSUM, "int_rowsum_off_by_one.py").gate("CMP-01")
    assert gate.status is Status.FAIL
    assert gate.evidence["error_model"] == "exact"
    (finding,) = gate.counterexample.findings
    assert finding["output_position"] == [0] and finding["abs_error"] == 1


def test_output_kind_falls_back_to_the_dtype_for_older_contracts() -> None:
    older = OutputSpec("out0", [4], "int64")  # a /2 contract: no kind
    assert output_kind(older, torch.zeros(4, dtype=torch.int64)) is OutputKind.EXACT
    assert output_kind(None, torch.zeros(4)) is OutputKind.VALUES
    indices_without_record = OutputSpec("out0", [4], "int64", OutputKind.INDICES)
    assert output_kind(indices_without_record, torch.zeros(4)) is OutputKind.EXACT


def test_exact_judgement_leaves_out_what_the_reference_itself_does_not_decide() -> None:
    expected = torch.tensor([1, 2, 3])
    actual = torch.tensor([1, 2, 4])
    assert not assess_exact(expected, actual).passed
    honest = {"native-eager": torch.tensor([1, 2, 4])}  # the reference's own run agrees
    judged = assess_exact(expected, actual, honest)
    assert judged.passed and judged.excluded == 1


def test_index_judgement_of_repeats_ranges_and_sets() -> None:
    source = torch.tensor([[5.0, 5.0, 1.0, 0.0]], dtype=torch.float64)
    topk = IndexOutput("aten::topk", 0, -1, IndexOrder.VALUES, True)
    want = torch.tensor([[0, 1]])
    assert assess_indices(topk, want, torch.tensor([[1, 0]]), source, {}).passed
    repeated = assess_indices(topk, want, torch.tensor([[0, 0]]), source, {})
    assert not repeated.passed and "repeated" in repeated.note  # right values, one position
    outside = assess_indices(topk, want, torch.tensor([[0, 4]]), source, {})
    assert not outside.passed and "out of range" in outside.note
    as_set = IndexOutput("aten::topk", 0, -1, IndexOrder.ANY, True)
    want_set = torch.tensor([[0, 2]])
    source_set = torch.tensor([[5.0, 0.0, 3.0]], dtype=torch.float64)
    assert assess_indices(as_set, want_set, torch.tensor([[2, 0]]), source_set, {}).passed
    assert not assess_indices(topk, want_set, torch.tensor([[2, 0]]), source_set, {}).passed


def test_near_ties_of_a_computed_source_are_judged_within_its_honest_error() -> None:
    source = torch.tensor([[1.0, 1.0 + 1e-7, -3.0]], dtype=torch.float64)
    honest = {"native-eager": source + torch.tensor([[1e-7, 0.0, 0.0]], dtype=torch.float64)}
    argmax = IndexOutput("aten::argmax", 0, 1, IndexOrder.VALUES, False)
    want = torch.tensor([1])
    assert assess_indices(argmax, want, torch.tensor([0]), source, honest).passed
    assert not assess_indices(argmax, want, torch.tensor([0]), source, {}).passed  # exact source
    assert not assess_indices(argmax, want, torch.tensor([2]), source, honest).passed


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("reference", "candidate", "outcome"),
    [
        (TOPK, "idx_topk_other_ties.py", "verified"),
        (TOPK, "idx_topk_wrong_indices.py", "rejected"),
        (ARGMAX, "idx_argmax_last.py", "verified"),
        (SORT, "idx_sort_stable_honest.py", "verified"),
        (SORT, "idx_sort_unstable.py", "rejected"),
        (ROWSUM, "int_rowsum_off_by_one.py", "rejected"),
    ],
)
def test_outputs_by_kind_on_the_device(reference: object, candidate: str, outcome: str) -> None:
    """On the device the reference's own ties fall where CUDA's topk and sort put them (not
    where the CPU's do), and index outputs come back by IPC handle: the same verdicts."""
    verdict = kernelgate.verify(reference, DATA / candidate, device="cuda", only=["CMP-01"])
    assert verdict.verdict.value == outcome, verdict.gate("CMP-01").reason
