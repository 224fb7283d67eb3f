"""Where EXC-01 and EXC-02 judge: on the oracle's device when its casts round as the CPU's.

The exact class gates once classified every output position on the host; at KernelBench's
sizes with an audit's judges sharing the host that was most of their time (issue 19). They
now judge where the candidate's output already lies, but only on a device whose float64
casts give the CPU's bits (``compare.rounds_like_cpu``), and go back to the CPU when that
device is out of memory. These tests hold that contract on the CPU; the GPU ones compare
the two places on the device.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import pytest
import torch

import kernelgate
from kernelgate.contract.spec import FlushPolicy
from kernelgate.gates.base import GateContext, Status
from kernelgate.gates.exc02_subnormal import CASES, ExpectedClasses, subnormal_values
from kernelgate.oracle.compare import (
    FloatClass,
    _rounding_probe,
    float_classes,
    rounds_like_cpu,
    same_rounding,
)

from .conftest import DATA

FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2]


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_the_cpu_rounds_like_itself_and_a_device_that_cannot_cast_back_does_not(
    dtype: torch.dtype,
) -> None:
    assert rounds_like_cpu("cpu", dtype)
    assert not rounds_like_cpu("meta", dtype)  # no values to bring back: stay on the CPU


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_the_probe_reaches_every_class_and_catches_a_flush(dtype: torch.dtype) -> None:
    on_cpu = _rounding_probe(dtype).to(dtype)
    classes = float_classes(on_cpu, dtype)
    present = {FloatClass(int(c)) for c in classes.unique()}
    assert {FloatClass.ZERO, FloatClass.SUBNORMAL, FloatClass.NORMAL, FloatClass.NAN} <= present
    assert torch.signbit(on_cpu.float()[classes == FloatClass.ZERO]).any()  # -0.0 is probed
    assert same_rounding(on_cpu, on_cpu)
    # a device that flushes subnormals (a fast-math build) to a zero of the same sign
    flushed = on_cpu.float().clone()
    flushed[classes == FloatClass.SUBNORMAL] *= 0.0
    assert not same_rounding(flushed.to(dtype), on_cpu)


INTEGERS = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool]


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_integer_outputs_have_a_probe_of_their_own(dtype: torch.dtype) -> None:
    """Top-k indices are int64: ORD-02 asked where to cast them and the probe, written for
    floats only, raised (torch.finfo of an integer type) in the H200 run of 2026-12-05."""
    probe = _rounding_probe(dtype)
    assert probe.dtype == torch.float64 and torch.isfinite(probe).all()
    assert same_rounding(probe.to(dtype), probe.to(dtype))
    assert rounds_like_cpu("cpu", dtype)
    assert not rounds_like_cpu("meta", dtype)
    wrong = probe.to(dtype).clone()
    wrong[0] = ~wrong[0] if dtype == torch.bool else wrong[0] + 1
    assert not same_rounding(wrong, probe.to(dtype))


def test_one_differing_bit_is_enough_and_nan_payloads_are_not_bits() -> None:
    on_cpu = _rounding_probe(torch.float32).to(torch.float32)
    one_off = on_cpu.clone()
    position = int(torch.nonzero(float_classes(on_cpu, torch.float32) == 1)[0])
    one_off.view(torch.int32)[position] += 1  # the next subnormal up: a rounding difference
    assert not same_rounding(one_off, on_cpu)
    other_nan = on_cpu.clone()
    nan = torch.isnan(other_nan)
    other_nan.view(torch.int32)[nan] = 0x7FC00001  # another quiet NaN
    assert same_rounding(other_nan, on_cpu)


def _context(device: str) -> Any:
    """Enough of a GateContext for ``on_class_judging_device``: a device it trusts."""
    context = SimpleNamespace(
        class_judging_device=lambda dtype: torch.device(device),
        spill=lambda reason: False,  # no oracle results held on the device to let go
    )
    for method in ("on_class_judging_device", "_on_device_or_cpu"):
        setattr(context, method, getattr(GateContext, method).__get__(context))
    return context


def test_a_device_out_of_memory_judges_again_on_the_cpu() -> None:
    asked: list[str] = []

    def compute(device: torch.device) -> str:
        asked.append(device.type)
        if device.type != "cpu":
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return "judged on the cpu"

    assert _context("meta").on_class_judging_device(torch.float32, compute) == "judged on the cpu"
    assert asked == ["meta", "cpu"]


def test_other_errors_are_not_taken_for_a_full_device() -> None:
    def compute(device: torch.device) -> None:
        raise RuntimeError("a judging bug must surface, not be retried on the CPU")

    with pytest.raises(RuntimeError, match="judging bug"):
        _context("meta").on_class_judging_device(torch.float32, compute)


def test_expectations_judge_on_their_own_device_whatever_the_run_lies_on() -> None:
    """An honest run comes from the oracle on the CPU; the expectation may lie on a GPU:
    ``accepted`` moves the run to the expectation, never the other way round."""
    want = subnormal_values((4096,), torch.float32, 5, CASES[0][1]).double()
    wanted = ExpectedClasses.of(want, torch.float32)
    got = want.to(torch.float32)
    accepted = wanted.accepted(got, FlushPolicy.PRESERVE)
    assert accepted.device == wanted.classes.device and bool(accepted.all())
    flushed = torch.where(float_classes(got, torch.float32) == 1, got * 0.0, got)  # same sign
    assert not bool(wanted.accepted(flushed, FlushPolicy.PRESERVE).all())
    assert bool(wanted.accepted(flushed, FlushPolicy.FLUSH_ALLOWED).all())


def _exact_gates(candidate: str, device: str, monkeypatch: pytest.MonkeyPatch, *, on_cpu: bool):
    if on_cpu:
        monkeypatch.setattr(
            GateContext, "class_judging_device", lambda self, d: torch.device("cpu")
        )
    verdict = kernelgate.verify(
        DATA / "exc02_reference.py", DATA / candidate, only=["EXC-01", "EXC-02"], device=device
    )
    monkeypatch.undo()
    return {g.id: g for g in verdict.gates if g.id in ("EXC-01", "EXC-02")}


@pytest.mark.gpu
@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int64], ids=str
)
def test_the_device_rounds_like_the_cpu(dtype: torch.dtype) -> None:
    """Not a promise of CUDA's, a property of PyTorch's build (no fast math): if this fails,
    the judge still holds (it judges on the CPU), but issue 19's speed-up is lost."""
    assert rounds_like_cpu("cuda", dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("candidate", ["exc02_honest.py", "exc02_flush.py", "exc02_sign_loss.py"])
def test_judging_on_the_device_gives_the_cpus_verdict_and_evidence(
    candidate: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_device = _exact_gates(candidate, "cuda", monkeypatch, on_cpu=False)
    on_host = _exact_gates(candidate, "cuda", monkeypatch, on_cpu=True)
    for gate_id, gate in on_device.items():
        host = on_host[gate_id]
        assert gate.status is host.status, (gate_id, gate.reason, host.reason)
        assert gate.evidence == host.evidence, gate_id
        if gate.status is Status.FAIL:
            assert (
                dataclasses.asdict(gate.counterexample)["findings"]
                == (dataclasses.asdict(host.counterexample)["findings"])
            )
