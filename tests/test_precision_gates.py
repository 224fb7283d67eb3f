"""ORD-01, PRC-01 and PRC-02: an honest candidate passes, each defect is rejected by its gate.

Small references of our own (row sum over (8, 3000), matmul 32x64x48) keep the Triton
interpreter fast.
"""

from __future__ import annotations

import pytest

import kernelgate
from kernelgate.gates.base import Status

from .conftest import DATA

ROWSUM = DATA / "prc_rowsum_reference.py"
MATMUL = DATA / "prc_matmul_reference.py"
RELU = DATA / "lib_relu_reference.py"
MINE = ["PRC-01", "PRC-02", "ORD-01"]


def _verify(reference, candidate: str, device: str = "cpu"):
    return kernelgate.verify(reference, DATA / candidate, device=device, only=MINE)


def test_honest_rowsum_passes_all_three_with_model_evidence() -> None:
    verdict = _verify(ROWSUM, "prc_rowsum_honest.py")
    for gate_id in MINE:
        gate = verdict.gate(gate_id)
        assert gate.status is Status.PASS, (gate_id, gate.reason)
        assert gate.evidence["error_model"] == "order"
        assert gate.evidence["n"] == 3000
        assert 0.0 < gate.evidence["worst_error_over_bound"] <= 1.0
        assert "sqrt(N)" in gate.evidence["bound"]
    prc01 = verdict.gate("PRC-01").evidence
    assert set(prc01["dtypes"]) == {"float32", "float16", "bfloat16"}


def test_ord01_rejects_a_dropped_partial_block() -> None:
    gate = _verify(ROWSUM, "ord_rowsum_drop_tail.py").gate("ORD-01")
    assert gate.status is Status.FAIL
    assert gate.counterexample is not None and "pattern=" in gate.counterexample.case
    assert gate.counterexample.findings[0]["abs_error"] > gate.counterexample.findings[0]["bound"]
    assert "--only ORD-01" in gate.counterexample.replay


def test_ord01_rejects_a_lossy_sequential_order_that_other_gates_accept() -> None:
    verdict = _verify(ROWSUM, "ord_rowsum_sequential.py")
    assert verdict.gate("ORD-01").status is Status.FAIL
    assert verdict.gate("ORD-01").evidence["worst_error_over_bound"] > 1.0
    # plain fp32 accumulation: the precision gates have nothing to object to
    assert verdict.gate("PRC-01").status is Status.PASS
    assert verdict.gate("PRC-02").status is Status.PASS


def test_prc02_rejects_an_fp16_accumulator_behind_fp32_io() -> None:
    gate = _verify(ROWSUM, "prc_rowsum_fp16acc.py").gate("PRC-02")
    assert gate.status is Status.FAIL
    assert gate.evidence["accumulate_unit_roundoff"] == pytest.approx(2.0**-24)
    assert gate.evidence["worst_error_over_bound"] > 1.0


def test_prc01_rejects_a_wrong_output_dtype() -> None:
    gate = _verify(ROWSUM, "prc_rowsum_wrong_dtype.py").gate("PRC-01")
    assert gate.status is Status.FAIL
    finding = gate.counterexample.findings[0]
    assert finding["problem"] == "dtype"
    assert (finding["expected"], finding["actual"]) == ("float32", "float16")


def test_prc01_matmul_honest_passes_and_downcast_fails() -> None:
    honest = _verify(MATMUL, "prc_matmul_honest.py")
    for gate_id in MINE:
        assert honest.gate(gate_id).status is Status.PASS, honest.gate(gate_id).reason
    prc01 = honest.gate("PRC-01")
    assert "float16" in prc01.evidence["dtypes"]
    assert "bfloat16" in prc01.evidence["not_run"]  # interpreter gap, stated, not passed
    assert prc01.evidence["n"] == 64
    downcast = _verify(MATMUL, "prc_matmul_downcast.py").gate("PRC-01")
    assert downcast.status is Status.FAIL
    assert "dtype=float32" in downcast.reason


def test_reduction_gates_skip_an_elementwise_reference() -> None:
    verdict = kernelgate.verify(RELU, DATA / "ord_torch_relu.py", only=MINE)
    for gate_id in ("ORD-01", "PRC-02"):
        gate = verdict.gate(gate_id)
        assert gate.status is Status.SKIPPED and "no reduction" in gate.reason
    assert verdict.gate("PRC-01").status is Status.PASS
    assert verdict.gate("PRC-01").evidence["error_model"] == "elementwise"


@pytest.mark.gpu
def test_gpu_tf32_where_ieee_fp32_is_promised_fails_prc01() -> None:
    honest = _verify(MATMUL, "prc_matmul_honest.py", device="cuda")
    for gate_id in MINE:
        assert honest.gate(gate_id).status is Status.PASS, honest.gate(gate_id).reason
    assert "bfloat16" in honest.gate("PRC-01").evidence["dtypes"]
    tf32 = _verify(MATMUL, "prc_matmul_tf32.py", device="cuda").gate("PRC-01")
    assert tf32.status is Status.FAIL
    assert "dtype=float32" in tf32.reason


@pytest.mark.gpu
def test_gpu_rowsum_gates() -> None:
    assert _verify(ROWSUM, "prc_rowsum_honest.py", device="cuda").verdict.value == "verified"
    assert _verify(ROWSUM, "prc_rowsum_fp16acc.py", device="cuda").gate("PRC-02").status is (
        Status.FAIL
    )
    assert _verify(ROWSUM, "ord_rowsum_drop_tail.py", device="cuda").gate("ORD-01").status is (
        Status.FAIL
    )
