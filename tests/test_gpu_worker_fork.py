"""Device workers forked by the worker fork server (``KERNELGATE_WORKER_FORK_DEVICE=1``):
each creates its own CUDA context after the fork, and is judged as a fresh one is.

Run on the device: ``PYTHONPATH=src python -m pytest -q -s -m gpu tests/test_gpu_worker_fork.py``
(``-s`` prints the start-up times, fresh and forked)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

import kernelgate
from kernelgate.audit.zygote import ForkedJudge
from kernelgate.sandbox import forkserver
from kernelgate.sandbox.session import WorkerSession

from .conftest import SOFTMAX

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def _first_call(forked: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[bool, float, bool]:
    """(whether the worker was forked, seconds to its first answer, whether it was right)."""
    if forked:
        monkeypatch.setenv(forkserver.DEVICE_ENV, "1")
    else:
        monkeypatch.delenv(forkserver.DEVICE_ENV, raising=False)
    x = torch.randn(64, 1000, generator=torch.Generator().manual_seed(0))
    started = time.monotonic()
    with WorkerSession(SOFTMAX / "honest.py", [], device="cuda", timeout=120) as session:
        session.start()
        result = session.call([x], poison=0xFF, guard_bytes=0)
        seconds = time.monotonic() - started
        was_forked = isinstance(session._process, ForkedJudge)
        got = result.outputs.view().cpu()  # one output: the tensor itself
    return was_forked, seconds, bool(torch.allclose(got, torch.softmax(x, dim=-1), atol=1e-6))


def test_a_forked_device_worker_answers_as_a_fresh_one(monkeypatch: pytest.MonkeyPatch) -> None:
    fresh = _first_call(False, monkeypatch)
    forked = [_first_call(True, monkeypatch) for _ in range(3)]  # the first starts the server
    print(f"\nfresh: {fresh}\nforked: {forked}")
    assert fresh[0] is False and fresh[2]
    assert all(was_forked and right for was_forked, _, right in forked), forked


def test_the_honest_softmax_is_verified_with_forked_device_workers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(forkserver.DEVICE_ENV, "1")
    verdict = kernelgate.verify(SOFTMAX / "reference.py", SOFTMAX / "honest.py", device="cuda")
    assert verdict.verdict.value == "verified", [(g.id, g.reason) for g in verdict.gates]
    assert forkserver._current is not None and forkserver._current.failure is None
