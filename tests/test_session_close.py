"""Workers closed without waiting (fresh instances) are seen out before the verdict."""

from __future__ import annotations

import time
from pathlib import Path

from kernelgate.sandbox.session import WorkerSession, settle_retired_workers

PLAIN = """
import torch
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x + 1
"""

# A worker whose interpreter cannot exit: a non-daemon thread that never ends.
CLINGING = """
import threading, time, torch
threading.Thread(target=time.sleep, args=(3600,)).start()
class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x + 1
"""


def _started(tmp_path: Path, source: str, grace: float) -> WorkerSession:
    candidate = tmp_path / "candidate.py"
    candidate.write_text(source)
    session = WorkerSession(candidate, [], timeout=60)
    session.exit_grace = grace
    session.start()
    return session


def test_close_without_waiting_returns_at_once_and_settle_reaps(tmp_path) -> None:
    session = _started(tmp_path, PLAIN, grace=30.0)
    process = session._process
    assert process is not None and process.poll() is None
    session.close(wait=False)
    settle_retired_workers()
    assert process.poll() is not None  # exited of its own accord, well inside the grace
    session.__exit__(None, None, None)


def test_a_worker_that_will_not_exit_is_killed_after_its_grace(tmp_path) -> None:
    session = _started(tmp_path, CLINGING, grace=1.0)
    process = session._process
    assert process is not None
    started = time.monotonic()
    session.close(wait=False)
    assert time.monotonic() - started < 0.5  # nobody waited in line
    assert process.poll() is None  # still there: its thread holds the interpreter
    settle_retired_workers()
    assert process.poll() is not None
    assert time.monotonic() - started < 15
    session.__exit__(None, None, None)
