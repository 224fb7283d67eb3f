"""A judge's CUDA waits sleep instead of spin (audit/device_waits.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

from kernelgate.audit import device_waits

from .conftest import ROOT


def test_asked_to_spin_it_does_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(device_waits.ENV, "spin")
    assert device_waits.block_on_device_waits() == f"{device_waits.ENV}=spin"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU machine's answer")
def test_without_a_device_it_says_why_and_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(device_waits.ENV, raising=False)
    why = device_waits.block_on_device_waits()
    assert why is not None and why  # no driver, or no device: said, not raised
    assert device_waits.primary_context_schedule() is None


def _schedule_after_torch_starts(wait: str) -> dict:
    code = (
        "import json, torch\n"
        "from kernelgate.audit import device_waits as w\n"
        "why = w.block_on_device_waits()\n"
        "torch.ones(1, device='cuda').add_(1); torch.cuda.synchronize()\n"
        "print(json.dumps({'why': why, 'schedule': w.primary_context_schedule()}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), device_waits.ENV: wait}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_torchs_context_blocks_when_asked_before_its_first_cuda_call() -> None:
    blocked = _schedule_after_torch_starts("block")
    print(f"\nblock: {blocked}")
    assert blocked == {"why": None, "schedule": device_waits.CU_CTX_SCHED_BLOCKING_SYNC}
    spun = _schedule_after_torch_starts("spin")
    print(f"spin: {spun}")
    assert spun["schedule"] != device_waits.CU_CTX_SCHED_BLOCKING_SYNC
