"""Every softmax example gets its expected verdict, rejected by its intended gate (CPU mode)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import kernelgate
from kernelgate.demo import intended_gates, read_expectations
from kernelgate.gates.base import Status

from .conftest import SOFTMAX

REFERENCE, EXPECTATIONS = read_expectations(SOFTMAX)
HANG_TIMEOUT = 5.0


@pytest.mark.parametrize("expectation", EXPECTATIONS, ids=lambda e: e.file.stem)
def test_example_gets_expected_verdict(expectation) -> None:
    # A defect is judged by the gate that must reject it (the demo runs every gate on each);
    # honest candidates go through all twelve.
    only = intended_gates(expectation.gate)
    started = time.monotonic()
    verdict = kernelgate.verify(
        REFERENCE,
        expectation.file,
        device="cpu",
        timeout=HANG_TIMEOUT,
        compile_timeout=HANG_TIMEOUT,  # a hang on the first call overflows into it
        only=only,
    )
    elapsed = time.monotonic() - started
    assert verdict.verdict.value == expectation.verdict, [
        (g.id, g.status.value, g.reason) for g in verdict.gates
    ]
    if expectation.gate is not None:
        failing = verdict.gate(expectation.gate)
        assert failing.status is Status.FAIL
        assert failing.counterexample is not None
        assert "--only" in failing.counterexample.replay
    else:
        assert all(g.status is Status.PASS for g in verdict.gates)
    if expectation.file.stem == "infinite_loop":
        # Rejected within the timeout: one hang, then no further call is made.
        assert elapsed < 2 * HANG_TIMEOUT + 30
        assert verdict.gate("RES-01").evidence["incidents"][0]["kind"] == "timeout"


def test_answer_cache_is_caught_as_stale_answer() -> None:
    verdict = kernelgate.verify(REFERENCE, SOFTMAX / "answer_cache.py")
    ord02 = verdict.gate("ORD-02")
    assert ord02.status is Status.FAIL and "stale" in ord02.reason
    assert verdict.gate("CMP-01").status is Status.FAIL


def test_judge_survives_crashes_and_goes_on() -> None:
    """A segfault and an os._exit in the worker leave the judge able to verify the next one.

    The crashing candidates are judged by the gates that must reject them (as above: one
    that calls the candidate, and RES-01), not by every gate: each of those would only
    start another worker to see the same crash."""
    for name in ("segfault", "os_exit"):
        verdict = kernelgate.verify(
            REFERENCE, SOFTMAX / f"{name}.py", timeout=HANG_TIMEOUT, only=intended_gates("RES-01")
        )
        res01 = verdict.gate("RES-01")
        assert res01.status is Status.FAIL
        kinds = {i["kind"] for i in res01.evidence["incidents"]}
        assert kinds == ({"crash"} if name == "segfault" else {"exit"})
    assert kernelgate.verify(REFERENCE, SOFTMAX / "honest.py").verdict.value == "verified"


def test_counterexample_replays_the_same_failure(tmp_path: Path) -> None:
    full = kernelgate.verify(REFERENCE, SOFTMAX / "nan_swallow.py", seed=7)
    replayed = kernelgate.verify(REFERENCE, SOFTMAX / "nan_swallow.py", seed=7, only=["EXC-01"])
    a, b = full.gate("EXC-01"), replayed.gate("EXC-01")
    assert a.status is b.status is Status.FAIL
    assert a.counterexample.findings == b.counterexample.findings
    assert a.counterexample.seed == b.counterexample.seed
    assert replayed.gate("CMP-01").status is Status.SKIPPED
