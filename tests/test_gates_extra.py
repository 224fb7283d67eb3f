"""Gate behaviour beyond the softmax examples: plain PyTorch candidates, aliasing, OOB writes."""

from __future__ import annotations

import kernelgate
from kernelgate.gates.base import Status

from .conftest import DATA, SOFTMAX

REFERENCE = SOFTMAX / "reference.py"


def test_reference_itself_is_verified() -> None:
    assert kernelgate.verify(REFERENCE, DATA / "torch_softmax.py").verdict.value == "verified"


def test_mutating_and_returning_the_input_fails_mem01() -> None:
    verdict = kernelgate.verify(REFERENCE, DATA / "returns_input.py", only=["MEM-01"])
    mem01 = verdict.gate("MEM-01")
    assert mem01.status is Status.FAIL
    problems = {f["problem"] for f in mem01.counterexample.findings}
    assert "input arg0 was modified" in problems
    assert "output 0 aliases input arg0" in problems


def test_write_past_the_output_fails_mem01() -> None:
    verdict = kernelgate.verify(REFERENCE, DATA / "oob_write.py", only=["MEM-01"])
    mem01 = verdict.gate("MEM-01")
    assert mem01.status is Status.FAIL
    assert "guard band after" in mem01.reason
