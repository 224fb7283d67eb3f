"""The host-memory guard: it stops the largest of several judges when memory runs low, never
a judge that runs alone, and the audit judges the stopped record again."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelgate.audit import memory_guard
from kernelgate.audit.memory_guard import GIB, HostMemoryGuard

from .audit_corpus import EXPECTED, write_pairs

pytestmark = pytest.mark.skipif(
    not Path("/proc/meminfo").exists(), reason="the guard reads Linux's /proc"
)

HOLD = "import time; block = bytearray(300 * 2**20); time.sleep(60)"  # 300 MiB resident


def start(code: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code])


def wait_until_resident(process: subprocess.Popen[bytes], nbytes: int) -> None:
    deadline = time.monotonic() + 30
    while memory_guard.tree_rss(process.pid, {}) < nbytes and time.monotonic() < deadline:
        time.sleep(0.1)


def test_the_guard_stops_the_largest_judge_when_memory_runs_low() -> None:
    low = HostMemoryGuard(meminfo=lambda: {"MemTotal": 64 * GIB, "MemAvailable": 1 * GIB})
    big, small = start(HOLD), start("import time; time.sleep(60)")
    try:
        wait_until_resident(big, 250 * 2**20)
        low.register(small.pid)
        assert low.check() is None  # one judge alone is never stopped
        low.register(big.pid)
        big.wait(timeout=30)  # stopped by check() or the guard's own watch, whichever first
        assert big.returncode == -9 and small.poll() is None
        reason = low.stopped(big.pid)
        assert reason and "host-memory guard" in reason and "1.0 GiB of 64 GiB" in reason
        assert low.stopped(small.pid) is None and low.history == [reason]
    finally:
        for process in (big, small):
            process.kill()
            process.wait()


def test_the_guard_leaves_judges_alone_while_memory_suffices() -> None:
    roomy = HostMemoryGuard(meminfo=lambda: {"MemTotal": 64 * GIB, "MemAvailable": 32 * GIB})
    first, second = start(HOLD), start(HOLD)
    try:
        roomy.register(first.pid)
        roomy.register(second.pid)
        assert roomy.check() is None
        time.sleep(2.5)  # the guard's own watch looks too
        assert first.poll() is None and second.poll() is None and roomy.history == []
    finally:
        for process in (first, second):
            process.kill()
            process.wait()


def test_on_a_vm_whose_memory_grows_the_guard_counts_the_host_memory_it_is_told() -> None:
    """A Firecracker VM shows 31 of its 128 GiB at first: 1 GiB "available" there is 98 GiB
    left, not a reason to stop anyone; without being told, the guard sees 1 GiB."""
    grown_so_far = {"MemTotal": 31 * GIB, "MemAvailable": 1 * GIB}
    told = HostMemoryGuard(host_memory=128 * GIB, meminfo=lambda: grown_so_far)
    assert told.memory() == (98 * GIB, 128 * GIB)
    assert told.memory()[0] > told.reserve(128 * GIB)
    untold = HostMemoryGuard(meminfo=lambda: grown_so_far)
    assert untold.memory() == (1 * GIB, 31 * GIB) and untold.reserve(31 * GIB) > 1 * GIB
    full = HostMemoryGuard(
        host_memory=128 * GIB, meminfo=lambda: {"MemTotal": 128 * GIB, "MemAvailable": 3 * GIB}
    )
    assert full.memory() == (3 * GIB, 128 * GIB)


def test_an_audit_judges_a_record_the_guard_stopped_again_with_fewer_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Memory looks low until the guard's first stop: one of two judges is stopped, and its
    record is judged again alone; both rows get the verdicts they should."""
    from kernelgate.audit import runner

    stops: list[str] = []
    guard = HostMemoryGuard(
        meminfo=lambda: {"MemTotal": 64 * GIB, "MemAvailable": GIB if not stops else 32 * GIB}
    )
    guard.history = stops
    monkeypatch.setattr(memory_guard, "_shared", guard)
    names = ["honest", "nan_swallow"]
    corpus = write_pairs(tmp_path / "corpus", names)
    # the guard's mechanics, not the gates: a partial audit (EXC-01 rejects the NaN
    # swallower; tests/test_audit.py's docstring says why that is enough)
    outcome = runner.run_audit(corpus, tmp_path / "out", workers=2, timeout=5.0, only=["EXC-01"])
    rows = {row["id"]: row for row in outcome.summary["rows"]}
    assert {name: rows[name]["verdict"] for name in names} == {
        name: EXPECTED[name][0] for name in names
    }
    assert len(stops) == 1
    from .test_audit import stored_rows

    stored = stored_rows(tmp_path / "out")
    alone = [name for name in names if stored[name].get("judged_alone")]
    assert len(alone) == 1, stored
