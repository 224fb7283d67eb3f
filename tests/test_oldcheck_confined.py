"""The audit's old check (``audit/oldcheck.py``) runs confined, as ``verify``'s worker does.

Its child imports the candidate, so it is started under ``sandbox/confine.py`` with a
scratch folder of its own; it dies with its judge although, in a PID namespace, the judge
is not its parent; and a confinement the machine cannot give a trusted probe is loosened
and reported, never silently. Each test starts one or two old-check children (a torch
import each, a few seconds of CPU).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from kernelgate.audit import oldcheck
from kernelgate.audit.processes import children_map, descendants
from kernelgate.redteam.hostile.catalog import REFERENCES
from kernelgate.sandbox import confine
from kernelgate.sandbox import session as session_module

from .conftest import ROOT, gone

REFERENCE = REFERENCES / "vector_add.py"
HONEST_FORWARD = "class ModelNew(nn.Module):\n    def forward(self, a, b):\n        return a + b\n"


def _candidate(tmp_path: Path, prelude: str, forward: str = HONEST_FORWARD) -> Path:
    path = tmp_path / "candidate.py"
    path.write_text("import os, time\nimport torch\nimport torch.nn as nn\n" + prelude + forward)
    return path


def _held(isolation_line: str) -> list[str]:
    """The mechanisms a ``confine.summary_line`` names as in force."""
    held = isolation_line.removeprefix("isolation: ").split(";")[0].split(" (Landlock")[0]
    return [name.strip() for name in held.split(",")]


def test_the_old_check_runs_confined_in_a_scratch_folder_it_leaves_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A candidate that writes beside its judge's files at import is still checked (and
    accepted: it adds right), its write is refused where the root is read-only, the row's
    detail says what confined it, and its scratch folder is gone afterwards."""
    if os.environ.get(confine.ENV_SWITCH) == "off":
        pytest.skip("confinement turned off for this run")
    escaped = tmp_path / "escaped.txt"
    prelude = f"open({str(escaped)!r}, 'w').write('out of the sandbox')\n"
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    result = oldcheck.run_old_check(
        REFERENCE, _candidate(tmp_path, prelude), device="cpu", timeout=30
    )
    assert result["isolation"].startswith("isolation: "), result
    held = _held(result["isolation"])
    if "readonly-root" not in held and "landlock-fs" not in held:
        pytest.skip(f"this machine cannot confine writes: {result['isolation']}")
    # the write raised at import, so the candidate did not load: rejected, never silently
    # loosened (the trusted probe loads under the same confinement)
    assert result["status"] == oldcheck.REJECTED and result["compiled"] is False, result
    assert "Read-only file system" in result["failure"] or "Permission" in result["failure"]
    assert not escaped.exists()
    assert "dropped" not in result["isolation"]
    assert not list(temporary.glob("kernelgate-oldcheck-*")), "the scratch folder is left"


def test_an_honest_candidate_is_accepted_confined(tmp_path: Path) -> None:
    result = oldcheck.run_old_check(REFERENCE, _candidate(tmp_path, ""), device="cpu", timeout=30)
    assert result["status"] == oldcheck.ACCEPTED and result["passed_legacy"] == 5, result
    assert "private-scratch" in _held(result["isolation"])


def test_a_confinement_the_probe_cannot_load_under_is_loosened_and_reported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the trusted probe fails under the full confinement (as CUDA might on some
    host), the old check runs again as the worker would, and the detail says what was
    dropped and why. Here the candidate fails only when its root is read-only."""
    if os.environ.get(confine.ENV_SWITCH) == "off":
        pytest.skip("confinement turned off for this run")
    monkeypatch.setattr(session_module, "_LOOSENED", {})

    def probe_error(device: str, wrapper: list[str], skip: list[str], mode: str) -> str:
        loosened = {"landlock-fs", "readonly-root"} <= set(skip)
        return "" if loosened or mode == "off" else "probe: CUDA refused"

    monkeypatch.setattr(session_module, "_probe_error", probe_error)
    prelude = f"open({str(tmp_path / 'probe-write')!r}, 'w').close()\n"
    result = oldcheck.run_old_check(
        REFERENCE, _candidate(tmp_path, prelude), device="cpu", timeout=30
    )
    assert result["status"] == oldcheck.ACCEPTED, result
    held = _held(result["isolation"])
    assert "landlock-fs" not in held and "readonly-root" not in held
    assert "landlock-fs (dropped: a trusted probe worker failed" in result["isolation"]
    assert "probe: CUDA refused" in result["isolation"]


HANGS = {
    # the child's watcher thread sees the result pipe lose its reader
    "sleeping": "time.sleep(300)",
    # the watcher is starved (ctypes.PyDLL keeps the interpreter lock through the call): the
    # launcher, started to die with the judge, takes the confined tree with it
    "holding the interpreter lock": "import ctypes; ctypes.PyDLL(None).sleep(300)",
}


@pytest.mark.parametrize("hang", list(HANGS))
def test_the_old_check_child_dies_with_its_judge(tmp_path: Path, hang: str) -> None:
    """A judge killed mid-trial (SIGKILL: no clean-up of its own) leaves nothing running,
    though inside a PID namespace the child's parent is the namespace's init, not the
    judge, and its launcher is not the judge's thread either."""
    if hang != "sleeping" and os.environ.get(confine.ENV_SWITCH) == "off":
        pytest.skip("confinement turned off for this run: no launcher to die with the judge")
    forward = f"class ModelNew(nn.Module):\n    def forward(self, a, b):\n        {HANGS[hang]}\n"
    candidate = _candidate(tmp_path, "", forward)
    judge = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom pathlib import Path\nfrom kernelgate.audit import oldcheck\n"
            "oldcheck.run_old_check(Path(sys.argv[1]), Path(sys.argv[2]), device='cpu', "
            "timeout=300)\n",
            str(REFERENCE),
            str(candidate),
        ],
        # a judge killed with SIGKILL cannot remove the child's scratch folder: keep it here
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "TMPDIR": str(tmp_path)},
    )
    try:
        deadline = time.monotonic() + 120
        tree: list[int] = []
        while time.monotonic() < deadline:
            tree = descendants(judge.pid, children_map())
            if any(_is_old_check_in_trial(pid) for pid in tree):
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"the old check never reached its trials: {tree}")
        os.kill(judge.pid, signal.SIGKILL)
        judge.wait()
        assert all(gone(pid, 10.0) for pid in tree), [p for p in tree if not gone(p, 0)]
    finally:
        judge.kill()
        judge.wait()


def _is_old_check_in_trial(pid: int) -> bool:
    """Whether ``pid`` is an old-check child sleeping in the candidate's forward."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        stack = Path(f"/proc/{pid}/wchan").read_text()
    except OSError:
        return False
    threads = len(list(Path(f"/proc/{pid}/task").iterdir())) if command else 0
    return b"kernelgate.audit.oldcheck" in command and threads > 1 and "nanosleep" in stack


def test_a_shared_scratch_carries_the_old_checks_builds_to_the_workers(tmp_path: Path) -> None:
    """The audit gives a record's old check and its verification one scratch folder, so a
    build the check made (a CUDA extension, a Triton kernel) is there for the workers; the
    check leaves a shared folder in place, and the workers run in it."""
    import kernelgate

    prelude = "import uuid\nopen(f'imported-{uuid.uuid4().hex}', 'w').close()\n"
    candidate = _candidate(tmp_path, prelude)
    scratch = tmp_path / "record-scratch"
    scratch.mkdir()
    result = oldcheck.run_old_check(REFERENCE, candidate, device="cpu", timeout=30, scratch=scratch)
    assert result["status"] == "accepted", result
    after_check = {p.name for p in scratch.glob("imported-*")}
    assert after_check, "the check's child imported the candidate in the shared folder"
    verdict = kernelgate.verify(REFERENCE, candidate, only=["CMP-01"], scratch=scratch)
    assert verdict.verdict.value in ("verified", "narrowed"), verdict.failed_gates
    assert after_check < {p.name for p in scratch.glob("imported-*")}, "workers ran there too"


def test_the_checks_device_peak_is_kept_only_as_a_count_of_bytes() -> None:
    """The child reports its allocator's device peak for fitting the check's admission
    estimate; the judge keeps a non-negative int and nothing else under that name."""
    base = {"status": oldcheck.ACCEPTED, "status_current": oldcheck.ACCEPTED}
    kept = oldcheck._validated(base | {"device_peak_bytes": 3 << 30})
    assert kept["device_peak_bytes"] == 3 << 30
    for bad in (-1, True, "3 GiB", 2.5, None):
        assert "device_peak_bytes" not in oldcheck._validated(base | {"device_peak_bytes": bad})


def test_a_cpu_check_reports_no_device_peak(tmp_path: Path) -> None:
    result = oldcheck.run_old_check(REFERENCE, _candidate(tmp_path, ""), device="cpu", timeout=30)
    assert result["status"] == oldcheck.ACCEPTED and "device_peak_bytes" not in result
