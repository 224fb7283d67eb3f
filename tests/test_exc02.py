"""EXC-02 (subnormals and signed zeros): defective kernels rejected, honest ones pass."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import kernelgate
from kernelgate.contract.derive import derive_contract
from kernelgate.contract.spec import FlushPolicy
from kernelgate.formats.kernelbench import load_reference
from kernelgate.gates.base import Status
from kernelgate.gates.exc02_subnormal import (
    CASES,
    FloatClass,
    class_determined,
    float_classes,
    subnormal_values,
)
from kernelgate.oracle.error_models import SAFETY, admissible_error
from kernelgate.redteam.catalog import entries
from kernelgate.redteam.runner import CAUGHT, PASSED, calibrate

from .conftest import DATA, SOFTMAX

HALF = DATA / "exc02_reference.py"
EXP = DATA / "exc02_exp_reference.py"


def _exc02(reference, candidate, **kwargs):
    verdict = kernelgate.verify(reference, candidate, only=["EXC-02"], **kwargs)
    return verdict.gate("EXC-02")


def _contract(reference, flush: FlushPolicy):
    contract = derive_contract(load_reference(reference))
    contract.postcondition = dataclasses.replace(contract.postcondition, flush=flush)
    return contract


@pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)], ids=["cpu", "cuda"]
)
def test_generated_values_cover_every_class_and_both_zero_signs(device: str) -> None:
    values = subnormal_values((4096,), torch.float32, 1, CASES[0][1], device)
    assert values.device.type == "cpu"
    classes = float_classes(values, torch.float32)
    for cls in (FloatClass.ZERO, FloatClass.SUBNORMAL, FloatClass.NORMAL):
        assert (classes == cls).any(), cls
    zeros = values[classes == FloatClass.ZERO]
    assert torch.signbit(zeros).any() and (~torch.signbit(zeros)).any()
    tiny = torch.finfo(torch.float32).tiny
    assert ((values.abs() < tiny) & (values.abs() > tiny * 0.999)).any()  # near the boundary
    assert torch.equal(values, subnormal_values((4096,), torch.float32, 1, CASES[0][1], device))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_subnormals_are_subnormal_in_their_dtype(dtype: torch.dtype) -> None:
    values = subnormal_values((2048,), dtype, 3, CASES[2][1])
    assert values.dtype == dtype
    assert (float_classes(values, dtype) == FloatClass.SUBNORMAL).sum() > 500


def test_honest_elementwise_kernel_passes() -> None:
    gate = _exc02(HALF, DATA / "exc02_honest.py")
    assert gate.status is Status.PASS, gate.reason
    assert gate.evidence["judged_positions"] == len(CASES) * 8 * 96
    assert gate.evidence["flush_policy"] == "preserve"


def test_flushing_subnormals_to_zero_fails() -> None:
    gate = _exc02(HALF, DATA / "exc02_flush.py")
    assert gate.status is Status.FAIL
    classes = {(f["expected_class"], f["actual_class"]) for f in gate.counterexample.findings}
    assert ("SUBNORMAL", "ZERO") in classes
    assert "--only EXC-02" in gate.counterexample.replay


def test_losing_the_sign_of_zero_fails() -> None:
    gate = _exc02(HALF, DATA / "exc02_sign_loss.py")
    assert gate.status is Status.FAIL
    for finding in gate.counterexample.findings:
        assert finding["expected_class"] == finding["actual_class"] == "ZERO"
        assert (finding["expected_sign"], finding["actual_sign"]) == ("-", "+")


def test_same_signed_flush_fails_preserve_and_passes_flush_allowed() -> None:
    candidate = DATA / "exc02_flush_signed.py"
    strict = _exc02(HALF, candidate, contract=_contract(HALF, FlushPolicy.PRESERVE))
    assert strict.status is Status.FAIL
    relaxed = _exc02(HALF, candidate, contract=_contract(HALF, FlushPolicy.FLUSH_ALLOWED))
    assert relaxed.status is Status.PASS, relaxed.reason
    assert relaxed.evidence["flush_policy"] == "flush-allowed"
    # flush-allowed does not excuse a sign lost in the flush
    lossy = _exc02(
        HALF, DATA / "exc02_flush.py", contract=_contract(HALF, FlushPolicy.FLUSH_ALLOWED)
    )
    assert lossy.status is Status.FAIL


def test_honest_softmax_example_passes() -> None:
    gate = _exc02(SOFTMAX / "reference.py", SOFTMAX / "honest.py")
    assert gate.status is Status.PASS, gate.reason


def test_subnormal_outputs_of_exp_are_kept_by_the_interpreter() -> None:
    gate = _exc02(EXP, DATA / "exc02_exp.py")
    assert gate.status is Status.PASS, gate.reason
    assert gate.evidence["judged_positions"] > 0


@pytest.mark.gpu
def test_exc02_on_the_device_and_whether_triton_exp_flushes() -> None:
    """Device mode: honest elementwise passes, flush fails; report whether tl.exp flushes."""
    assert _exc02(HALF, DATA / "exc02_honest.py", device="cuda").status is Status.PASS
    assert _exc02(HALF, DATA / "exc02_flush.py", device="cuda").status is Status.FAIL
    assert _exc02(SOFTMAX / "reference.py", SOFTMAX / "honest.py", device="cuda").status is (
        Status.PASS
    )
    relaxed = _exc02(
        EXP,
        DATA / "exc02_exp.py",
        device="cuda",
        contract=_contract(EXP, FlushPolicy.FLUSH_ALLOWED),
    )
    assert relaxed.status is Status.PASS, relaxed.reason
    strict = _exc02(EXP, DATA / "exc02_exp.py", device="cuda")
    print(
        f"\nTriton tl.exp on the device flushes subnormal results: {strict.status is Status.FAIL}"
    )
    if strict.status is Status.FAIL:  # then it must be exactly a flush, nothing else
        for finding in strict.counterexample.findings:
            assert (finding["expected_class"], finding["actual_class"]) == ("SUBNORMAL", "ZERO")
            assert finding["expected_sign"] == finding["actual_sign"]


def test_a_class_is_judged_only_where_the_admissible_error_cannot_move_it() -> None:
    """A reduction's output that cancels to near zero, or lands within its honest error of
    the smallest normal, has no class or sign the reference decides; exact zeros,
    well-separated subnormals and normals do."""
    tiny, smallest = torch.finfo(torch.float32).tiny, torch.finfo(torch.float32).tiny * 2**-23
    want = torch.tensor([0.0, -0.0, 5 * smallest, 5 * smallest, tiny, 1e-5, 1.0, float("inf")])
    width = torch.tensor([0.0, 1e-9, 1e-50, 6 * smallest, tiny * 1e-6, 2e-5, 1e-7, 0.0])
    determined = class_determined(want.double(), width.double(), torch.float32)
    assert determined.tolist() == [True, False, True, False, False, False, True, True]


def test_admissible_error_of_each_model() -> None:
    ref = torch.tensor([1.0, -2.0, 0.0], dtype=torch.float64)
    native = ref.float() + torch.tensor([1e-7, 0.0, 0.0])
    u = 2.0**-24
    elementwise = admissible_error("elementwise", {}, ref, torch.float32, {"n": native})
    assert torch.allclose(elementwise, SAFETY.elementwise_units * u * ref.abs())
    ensemble = admissible_error("ensemble", {}, ref, torch.float32, {"n": native})
    assert ensemble[0] > ensemble[2] == 0.0  # per element: an exact zero stays exact
    order = admissible_error(
        "order", {}, ref, torch.float32, {"n": native}, magnitude=ref.abs() + 10.0, n=64
    )
    assert (order > 0).all() and order[2] > 0  # the magnitude of the terms, not |ref|


# -- zeros whose sign the reference leaves open (oracle/zero_sign.py) -------------------------

OPEN_SIGN_CONTROLS = ["relu_mul_add_cuda_relu", "short_row_max"]
FIXED_SIGN_DEFECTS = ["relu_bias_zero_sign", "row_max_plus_zero", "signed_zero_lost"]


@pytest.mark.parametrize("name", OPEN_SIGN_CONTROLS)
def test_a_zero_sign_the_reference_leaves_open_is_accepted_either_way(name: str) -> None:
    """CUDA's relu(-0.0) = +0.0 (the CPU's is -0.0), IEEE's maximum(-0, +0) = +0 (the CPU's
    amax keeps the first zero): main rejected both kernels in CPU mode."""
    (entry,) = entries([name])
    gate = _exc02(entry.reference_path, entry.candidate_path)
    assert gate.status is Status.PASS, gate.reason
    assert gate.evidence["sign_open_positions"] > 0
    assert gate.evidence["open_zero_signs_consulted"] > 0
    assert gate.evidence["excluded_honest_disagreement"] == 0


@pytest.mark.parametrize("name", FIXED_SIGN_DEFECTS)
def test_a_zero_sign_ieee_fixes_is_still_judged(name: str) -> None:
    (entry,) = entries([name])
    gate = _exc02(entry.reference_path, entry.candidate_path)
    assert gate.status is Status.FAIL
    for finding in gate.counterexample.findings:
        assert finding["expected_class"] == finding["actual_class"] == "ZERO"
        assert (finding["expected_sign"], finding["actual_sign"]) == ("-", "+")


def test_a_class_is_still_judged_where_the_sign_is_open() -> None:
    """flush_subnormals (relu reference): relu(-0.0) is open, its flushed subnormals are not."""
    (entry,) = entries(["flush_subnormals"])
    gate = _exc02(entry.reference_path, entry.candidate_path)
    assert gate.status is Status.FAIL
    classes = {(f["expected_class"], f["actual_class"]) for f in gate.counterexample.findings}
    assert ("SUBNORMAL", "ZERO") in classes


@pytest.mark.gpu
def test_open_zero_signs_on_the_device() -> None:
    """On CUDA the float64 oracle takes CUDA's relu (+0.0 for -0.0), so there the CPU-convention
    twin is the kernel whose open signs must be accepted; every control of item 5 is verified
    through all twelve gates and every defect rejected by EXC-02."""
    (cpu_relu,) = entries(["relu_mul_add_cpu_relu"])
    gate = _exc02(cpu_relu.reference_path, cpu_relu.candidate_path, device="cuda")
    assert gate.status is Status.PASS, gate.reason
    assert gate.evidence["sign_open_positions"] > 0
    names = [*OPEN_SIGN_CONTROLS, "relu_mul_add_cpu_relu", *FIXED_SIGN_DEFECTS, "flush_subnormals"]
    cal = calibrate("cuda", names, jobs=1)
    missed = {r.name: (r.outcome, r.rejected_by) for r in cal.defects if r.outcome != CAUGHT}
    assert not missed, missed
    rejected = {r.name: (r.verdict, r.failure_reasons) for r in cal.controls if r.outcome != PASSED}
    assert not rejected, rejected
