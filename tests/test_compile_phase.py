"""The compile phase (sandbox/compile_budget.py): a build is charged to its own budget.

A candidate that builds on its first forward takes longer than ``--timeout`` and is
verified, with ``compile_seconds`` in the evidence; a build that fails, or runs past the
compile budget, is a load-stage result (``CandidateBuildError``), never RES-01. The builds
here are real (g++ through torch's ``cpp_extension.load``, a few seconds each), slowed by a
sleep the candidate puts in torch's own build step: keep them few.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

import kernelgate
from kernelgate.errors import CandidateBuildError
from kernelgate.sandbox.compile_budget import CallClock, CompileBudget

from .conftest import ROOT

REFERENCE = ROOT / "tests" / "data" / "lib_relu_reference.py"

# A ReLU that builds a tiny C library on its first forward (torch's JIT extension builder),
# sleeping SLEEP seconds inside torch's ninja step the first time (not when built already).
BUILDING_CANDIDATE = """
import ctypes, importlib, os, time
import torch
import torch.nn as nn

# by a computed name: the candidate's backend is read from its text, and one that names
# torch's extension builder is taken for a CUDA C++ candidate (refused on the CPU)
builder = importlib.import_module("torch.utils.cpp_" + "extension")

SLEEP = {sleep}
SOURCE = {source!r}
_ninja = builder._run_ninja_build


def _slow_ninja(build_directory, *args, **kwargs):
    if not any(name.endswith(".so") for name in os.listdir(build_directory)):
        time.sleep(SLEEP)
    return _ninja(build_directory, *args, **kwargs)


builder._run_ninja_build = _slow_ninja


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.answer = None

    def forward(self, x):
        if self.answer is None:
            folder = os.path.join(os.environ["TMPDIR"], "src")
            os.makedirs(folder, exist_ok=True)
            path = os.path.join(folder, "tiny.cpp")
            with open(path, "w") as f:
                f.write(SOURCE)
            library = builder.load(
                name="kg_tiny", sources=[path], is_python_module=False
            )
            self.answer = ctypes.CDLL(library).kg_answer()
        assert self.answer == 42
        return torch.clamp_min(x, 0.0)
"""
GOOD_SOURCE = 'extern "C" int kg_answer() { return 42; }\n'


def _candidate(tmp_path: Path, sleep: float, source: str = GOOD_SOURCE) -> Path:
    path = tmp_path / "building.py"
    path.write_text(BUILDING_CANDIDATE.format(sleep=sleep, source=source))
    return path


# -- the clock, alone -----------------------------------------------------------------------


def test_build_time_is_charged_to_the_budget_not_the_call() -> None:
    budget = CompileBudget(100.0)
    clock = CallClock(2.0, budget, started=0.0)
    clock.charge(1.0)  # one second of call time
    clock.event({"phase": "start", "what": "ext"}, now=1.0)
    assert clock.deadline() == pytest.approx(101.0)  # building: the budget's rest
    clock.event({"phase": "end", "what": "ext", "ok": True}, now=31.0)
    assert clock.compile_seconds == pytest.approx(30.0) and budget.left == pytest.approx(70.0)
    assert clock.deadline() == pytest.approx(32.0)  # the call's own second left, after it
    assert clock.builds == [{"what": "ext", "seconds": 30.0, "ok": True}]


def test_a_build_that_never_ends_is_bounded_by_the_budget() -> None:
    budget = CompileBudget(10.0)
    clock = CallClock(2.0, budget, started=0.0)
    for _ in range(5):  # forged starts, no end: still one budget
        clock.event({"phase": "start", "what": "forged"}, now=0.0)
    assert clock.deadline() == pytest.approx(10.0)
    clock.charge(10.0)
    assert clock.deadline() == pytest.approx(10.0) and budget.left == 0.0
    kind, detail = clock.expiry()
    assert kind == "build-timeout" and "compile budget" in detail


def test_first_call_overflows_into_the_budget_and_a_hang_stays_a_hang() -> None:
    budget = CompileBudget(5.0)
    clock = CallClock(2.0, budget, overflow=True, started=0.0)
    assert clock.deadline() == pytest.approx(7.0)
    clock.charge(3.0)
    assert clock.compile_seconds == pytest.approx(1.0)
    plain = CallClock(2.0, CompileBudget(5.0), started=0.0)
    assert plain.deadline() == pytest.approx(2.0)  # a later call gets no overflow
    budget.spend(10.0)
    assert clock.expiry()[0] == "timeout"  # nothing said it was building: RES-01's


# -- real builds in the worker ---------------------------------------------------------------


def test_a_first_call_that_builds_past_the_timeout_is_verified(tmp_path: Path) -> None:
    started = time.monotonic()
    verdict = kernelgate.verify(
        REFERENCE,
        _candidate(tmp_path, sleep=4.0),
        device="cpu",
        timeout=2.0,
        compile_timeout=120.0,
        only=["CMP-01", "ORD-02"],
    )
    assert verdict.verdict.value == "verified", [(g.id, g.reason) for g in verdict.gates]
    assert verdict.compile_seconds >= 4.0
    paid = verdict.compile["paid"]
    first = next(p for p in paid if p["instance"] == "main" and p["op"] == "call")
    assert first["at"] == "CMP-01" and first["builds"][0]["what"] == "torch extension kg_tiny"
    assert first["builds"][0]["ok"] and first["compile_seconds"] >= 4.0
    # ORD-02's fresh instances found the build done (one scratch folder per verification)
    assert all(p["compile_seconds"] < 4.0 for p in paid if p["instance"] == "fresh")
    assert verdict.to_dict()["compile_seconds"] == verdict.compile_seconds
    assert time.monotonic() - started < 120


def test_a_build_past_the_compile_budget_is_a_load_stage_result(tmp_path: Path) -> None:
    started = time.monotonic()
    with pytest.raises(CandidateBuildError, match="compile budget"):
        kernelgate.verify(
            REFERENCE,
            _candidate(tmp_path, sleep=60.0),
            device="cpu",
            timeout=2.0,
            compile_timeout=3.0,
            only=["CMP-01"],
        )
    assert time.monotonic() - started < 40  # killed at the budget, not after the sleep


def test_a_failed_build_is_a_load_stage_result(tmp_path: Path) -> None:
    broken = 'extern "C" int kg_answer() { return 42 }\n'  # no ';'
    with pytest.raises(CandidateBuildError, match="the build of torch extension kg_tiny failed"):
        kernelgate.verify(
            REFERENCE,
            _candidate(tmp_path, sleep=0.0, source=broken),
            device="cpu",
            timeout=30.0,
            compile_timeout=60.0,
            only=["CMP-01"],
        )
