"""Device mode on a CUDA GPU: the CPU suite's examples, plus what only a GPU can show."""

from __future__ import annotations

import time

import pytest

import kernelgate
from kernelgate.demo import intended_gates, read_expectations
from kernelgate.gates.base import Status

from .conftest import DATA, SOFTMAX

pytestmark = pytest.mark.gpu
REFERENCE, EXPECTATIONS = read_expectations(SOFTMAX)


@pytest.mark.parametrize("expectation", EXPECTATIONS, ids=lambda e: e.file.stem)
def test_examples_on_the_device(expectation) -> None:
    only = intended_gates(expectation.gate)
    verdict = kernelgate.verify(REFERENCE, expectation.file, device="cuda", timeout=20, only=only)
    assert verdict.verdict.value == expectation.verdict, [
        (g.id, g.status.value, g.reason) for g in verdict.gates
    ]
    if expectation.gate:
        assert verdict.gate(expectation.gate).status is Status.FAIL
    assert verdict.environment["triton_interpreter"] is False
    assert verdict.environment["oracle_device"].startswith("cuda")


def test_softmax_verify_wall_time_on_the_device() -> None:
    kernelgate.verify(REFERENCE, SOFTMAX / "honest.py", device="cuda")  # warm the Triton cache
    started = time.monotonic()
    verdict = kernelgate.verify(REFERENCE, SOFTMAX / "honest.py", device="cuda")
    elapsed = time.monotonic() - started
    print(f"\nverify honest softmax on cuda: {elapsed:.2f} s")
    assert verdict.verdict.value == "verified"
    assert elapsed < 10


def test_cuda_cpp_extension_candidate_is_verified() -> None:
    """The extension reads float32 pointers only; the softmax library contract also admits
    fp16 and bf16, so the honest outcome is narrowed to float32 (PRC-01), nothing else."""
    verdict = kernelgate.verify(REFERENCE, DATA / "cuda_softmax.py", device="cuda")
    failed = [(g.id, g.reason) for g in verdict.gates if g.status is Status.FAIL]
    assert verdict.verdict.value == "narrowed", failed
    assert {g for g, _ in failed} <= {"PRC-01", "RES-01"}, failed
    assert verdict.verified_domain["contract"]["inputs"][0]["dtypes"] == ["float32"]
    assert verdict.environment["candidate_backend"] == "cuda"


def test_device_fault_is_rejected_and_the_judge_goes_on() -> None:
    verdict = kernelgate.verify(REFERENCE, DATA / "device_fault.py", device="cuda", timeout=30)
    res01 = verdict.gate("RES-01")
    assert res01.status is Status.FAIL
    assert {i["kind"] for i in res01.evidence["incidents"]} <= {
        "device-fault",
        "exception",
        "crash",
    }
    assert (
        kernelgate.verify(REFERENCE, SOFTMAX / "honest.py", device="cuda").verdict.value
        == "verified"
    )


def test_unwritten_output_from_cpp_allocations_is_caught() -> None:
    """Outputs allocated in C++ are poisoned through the flooded caching allocator."""
    verdict = kernelgate.verify(
        REFERENCE, DATA / "cuda_unwritten.py", device="cuda", only=["MEM-01"]
    )
    mem01 = verdict.gate("MEM-01")
    assert mem01.status is Status.FAIL, mem01.reason
    assert {f["output_position"][0] for f in mem01.counterexample.findings} <= {28, 29}
