"""The worker fork server (sandbox/forkserver.py): a forked worker is confined and set up as
a fresh one is, cannot reach the server, and any failure of the server starts workers fresh.

What a worker sees is read back from /proc inside it, by a candidate that records it at
import; the same candidate runs in a fresh worker and a forked one, and the records are
compared field by field.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kernelgate.audit.zygote import ForkedJudge
from kernelgate.sandbox import forkserver
from kernelgate.sandbox.session import ExecutionIncident, WorkerSession

RECORD = "record.json"  # written by the candidate into its scratch

# At import: what confines this process, read back from /proc, and what it holds.
INSPECT = """
import json, os, resource, sys, tempfile
import torch

def status():
    keep = ("Uid", "Gid", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs",
            "Seccomp", "Seccomp_filters", "NSpid", "NSpgid", "NSsid")
    fields = {}
    for line in open("/proc/self/status"):
        name, _, value = line.partition(":")
        if name in keep:
            fields[name] = value.split()
    return fields

def descriptors():
    found = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            found[int(name)] = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            pass
    return found

record = {
    "status": status(),
    "limits": open("/proc/self/limits").read(),
    "namespaces": sorted(os.listdir("/proc/self/ns")),
    "ns_ids": {k: os.readlink(f"/proc/self/ns/{k}") for k in ("user", "pid", "net", "mnt")},
    "mounts": sorted(line.split()[1] + " " + line.split()[3].split(",")[0]
                     for line in open("/proc/self/mounts")),
    "cwd": os.getcwd(),
    "environ": dict(os.environ),
    "fds": descriptors(),
    "ppid": os.getppid(),
    "pgid_is_sid": os.getpgid(0) == os.getsid(0),
    "umask": os.umask(0o022),
    "tempdir": tempfile.gettempdir(),
    "path_has_cwd": "" in sys.path or os.getcwd() in sys.path,
    "triton_loaded": "triton" in sys.modules,
    "affinity": sorted(os.sched_getaffinity(0)),
    "torch_threads": torch.get_num_threads(),
}
with open(%r, "w") as handle:
    json.dump(record, handle)

class ModelNew(torch.nn.Module):
    def forward(self, a):
        return a + 1
"""


def _candidate(folder: Path, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "candidate.py"
    path.write_text(textwrap.dedent(source))
    return path


def _serving_server() -> forkserver.WorkerForkServer:
    """The fork server of this process for the sessions below, ready."""
    server = forkserver._current
    if server is None or server.failure is not None:
        pytest.skip("no worker fork server in this process")
    assert server.ready(), server.failure
    return server


def _record(tmp_path: Path, name: str) -> tuple[dict[str, Any], WorkerSession]:
    scratch = tmp_path / name / "scratch"
    candidate = _candidate(tmp_path / name, INSPECT % RECORD)
    session = WorkerSession(candidate, [], timeout=60, scratch=scratch)
    with session:
        _ = session.isolation
        forked = isinstance(session._process, ForkedJudge)
    record = json.loads((scratch / RECORD).read_text())
    record["forked"] = forked
    return record, session


@pytest.fixture
def fork_server(tmp_path: Path) -> forkserver.WorkerForkServer:
    """A serving fork server (started by a first worker if there was none)."""
    if not forkserver.enabled():
        pytest.skip(f"{forkserver.ENABLE_ENV}=0 for this run")
    if forkserver._current is None or not forkserver._current.serving():
        _record(tmp_path, "warm-up")
    return _serving_server()


def _normalised(record: dict[str, Any], scratch_of: str) -> dict[str, Any]:
    """What must be equal between two workers (their own scratch and ids aside)."""
    fds = record["fds"]
    kinds = sorted(
        "pipe" if target.startswith("pipe:") else target.replace(scratch_of, "<scratch>")
        for fd, target in fds.items()
        if int(fd) > 2
    )
    environ = {k: v.replace(scratch_of, "<scratch>") for k, v in record["environ"].items()}
    for switch in ("PYTEST_CURRENT_TEST", forkserver.ENABLE_ENV):
        environ.pop(switch, None)
    return {
        "status": {k: v for k, v in record["status"].items() if not k.startswith("NS")},
        "pid_1_and_2": [record["status"]["NSpid"][-1:], record["ppid"]],
        "limits": record["limits"],
        "namespaces": record["namespaces"],
        "mounts": [m.replace(scratch_of, "<scratch>") for m in record["mounts"]],
        "cwd": record["cwd"].replace(scratch_of, "<scratch>"),
        "environ": environ,
        "stdio": [fds.get(str(n), fds.get(n)) for n in (0,)],
        "same_log": fds.get("1") == fds.get("2"),
        "other_fds": kinds,
        "pgid_is_sid": record["pgid_is_sid"],
        "umask": record["umask"],
        "tempdir": record["tempdir"].replace(scratch_of, "<scratch>"),
        "path_has_cwd": record["path_has_cwd"],
        "triton_loaded": record["triton_loaded"],
        "affinity": record["affinity"],
        "torch_threads": record["torch_threads"],
    }


def test_a_forked_worker_is_confined_and_set_up_as_a_fresh_one(
    tmp_path, fork_server, monkeypatch
) -> None:
    forked, forked_session = _record(tmp_path, "forked")
    monkeypatch.setenv(forkserver.ENABLE_ENV, "0")
    fresh, fresh_session = _record(tmp_path, "fresh")
    assert forked["forked"] and not fresh["forked"]
    left = _normalised(forked, str(tmp_path / "forked" / "scratch"))
    right = _normalised(fresh, str(tmp_path / "fresh" / "scratch"))
    assert left == right
    assert forked_session.isolation == fresh_session.isolation
    # the worker's namespaces are its own, not the server's (nor the judge's)
    for kind in ("user", "pid", "net", "mnt"):
        ours = {os.readlink(f"/proc/{pid}/ns/{kind}") for pid in (fork_server.pid, os.getpid())}
        assert (forked["ns_ids"][kind] in ours) == (fresh["ns_ids"][kind] in ours), kind
        if kind in ("user", "pid") and f"{kind}-namespace" in fresh_session.isolation["in_force"]:
            assert forked["ns_ids"][kind] not in ours, kind
    # nothing of the server's: no socket, no pidfd, no descriptor beyond the session's
    assert not [t for t in forked["fds"].values() if "socket" in t or "pidfd" in t]
    assert forked["status"]["NoNewPrivs"] == fresh["status"]["NoNewPrivs"]


ATTACK = """
import ctypes, json, os, signal
import torch

server = %d
attempts = {}

def attempt(name, action):
    try:
        action()
        attempts[name] = "done"
    except Exception as exc:
        attempts[name] = type(exc).__name__

def ptrace_attach():
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, server, 0, 0) != 0:  # PTRACE_ATTACH
        raise OSError(ctypes.get_errno(), "ptrace")

attempt("signal 0", lambda: os.kill(server, 0))
attempt("kill", lambda: os.kill(server, signal.SIGKILL))
attempt("stop", lambda: os.kill(server, signal.SIGSTOP))
attempt("ptrace", ptrace_attach)
attempt("mem", lambda: open(f"/proc/{server}/mem", "rb").read(1))
attempt("kill parent", lambda: os.kill(os.getppid(), signal.SIGKILL))
with open("attempts.json", "w") as handle:
    json.dump(attempts, handle)

class ModelNew(torch.nn.Module):
    def forward(self, a):
        return a + 1
"""


def test_a_forked_candidate_cannot_signal_or_trace_the_server(tmp_path, fork_server) -> None:
    scratch = tmp_path / "attack" / "scratch"
    session = WorkerSession(
        _candidate(tmp_path / "attack", ATTACK % fork_server.pid), [], timeout=60, scratch=scratch
    )
    with session:
        report = session.isolation
        assert isinstance(session._process, ForkedJudge)
    if not {"pid-namespace", "landlock-signals"} & set(report["in_force"]):
        pytest.skip(f"neither PID namespace nor Landlock signal scoping here: {report}")
    attempts = json.loads((scratch / "attempts.json").read_text())
    for name in ("signal 0", "kill", "stop", "ptrace", "mem"):
        assert attempts[name] != "done", (name, attempts)
    state = Path(f"/proc/{fork_server.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    assert state in ("S", "R"), f"the server is {state}"
    assert fork_server.serving()
    # and it still forks: the next worker is its child, and works
    plain = _candidate(tmp_path / "plain", INSPECT % RECORD)
    with WorkerSession(plain, [], timeout=60, scratch=tmp_path / "plain" / "scratch") as after:
        assert isinstance(after._process, ForkedJudge)


CRASHES = """
import os, signal, torch

class ModelNew(torch.nn.Module):
    def forward(self, a):
        if float(a.sum()) > 10:
            os.kill(os.getpid(), signal.SIGSEGV)
        os._exit(7)
"""


def _incident(tmp_path: Path, name: str, value: float) -> ExecutionIncident:
    import torch

    session = WorkerSession(_candidate(tmp_path / name, CRASHES), [], timeout=60)
    with session:
        forked = isinstance(session._process, ForkedJudge)
        with pytest.raises(ExecutionIncident) as raised:
            session.call([torch.full((4,), value)], poison=0, guard_bytes=0)
    raised.value.detail += " forked" if forked else " fresh"
    return raised.value


def test_a_forked_worker_exits_and_crashes_as_a_fresh_one(
    tmp_path, fork_server, monkeypatch
) -> None:
    exited, crashed = _incident(tmp_path, "exit", 0.0), _incident(tmp_path, "segv", 9.0)
    assert (exited.kind, exited.detail) == ("exit", "worker exited with code 7 in mid-call forked")
    assert crashed.kind == "crash" and crashed.detail.startswith("worker killed by signal SIGSEGV")
    assert crashed.detail.endswith("forked")
    monkeypatch.setenv(forkserver.ENABLE_ENV, "0")
    fresh = _incident(tmp_path, "exit-fresh", 0.0)
    assert (fresh.kind, fresh.detail) == ("exit", "worker exited with code 7 in mid-call fresh")


def test_switched_off_every_worker_starts_fresh(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(forkserver.ENABLE_ENV, "0")
    monkeypatch.setattr(forkserver, "_current", None)
    monkeypatch.setattr(forkserver, "_servers", [])
    for name in ("one", "two"):
        record, _ = _record(tmp_path, name)
        assert not record["forked"]
    assert forkserver._current is None  # no server was even started


def test_a_server_that_cannot_start_leaves_workers_fresh_and_says_so(
    tmp_path, monkeypatch, capfd
) -> None:
    monkeypatch.delenv(forkserver.ENABLE_ENV, raising=False)
    monkeypatch.setattr(forkserver, "_current", None)
    monkeypatch.setattr(forkserver, "_servers", [])
    monkeypatch.setattr(forkserver, "_said", False)
    broken = ["/bin/sh", "-c", "exit 3"]  # ends before it says ready
    monkeypatch.setattr(forkserver.WorkerForkServer, "command", lambda self, fd: broken)
    first, _ = _record(tmp_path, "first")
    server = forkserver._current
    assert server is not None and not server.ready(30) and server.failure
    second, _ = _record(tmp_path, "second")
    assert not first["forked"] and not second["forked"]
    assert "workers start as fresh processes" in capfd.readouterr().err
    assert forkserver.running_servers() == []


def test_a_server_that_dies_leaves_later_workers_fresh(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(forkserver.ENABLE_ENV, raising=False)
    monkeypatch.setattr(forkserver, "_current", None)
    monkeypatch.setattr(forkserver, "_servers", [])
    monkeypatch.setattr(forkserver, "_said", True)
    _record(tmp_path, "starts-it")
    server = _serving_server()
    forked, _ = _record(tmp_path, "forked")
    assert forked["forked"]
    assert server.pid is not None
    os.kill(server.pid, signal.SIGKILL)
    server._thread.join(30)
    assert server.failure
    later, _ = _record(tmp_path, "later")
    assert not later["forked"]


@pytest.mark.parametrize(
    "fork, device_fork, device, served",
    [
        (None, None, "cpu", True),
        ("0", None, "cpu", False),
        (None, None, "cuda", False),  # device workers: opt-in
        (None, "1", "cuda", True),
        ("0", "1", "cuda", False),  # switched off is off for every worker
    ],
)
def test_which_workers_the_server_forks(monkeypatch, fork, device_fork, device, served) -> None:
    for name, value in ((forkserver.ENABLE_ENV, fork), (forkserver.DEVICE_ENV, device_fork)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    assert forkserver.serves(device) is served


def test_a_judge_that_exits_takes_its_fork_server_with_it() -> None:
    """A fork server dies with its judge through ``PR_SET_PDEATHSIG`` only a moment after
    the judge is gone; ``stop_servers`` (at exit) kills and reaps it first, so nothing of
    the judge runs once its caller sees it return. An exit hook registered before the
    import runs after ``stop_servers`` (last in, first out) and looks for the server."""
    if not forkserver.enabled():
        pytest.skip(f"{forkserver.ENABLE_ENV}=0 for this run")
    script = textwrap.dedent(
        """
        import atexit, json, os, sys
        seen = {}
        def look():
            pid = seen.get("pid")
            present = pid is not None and os.path.exists(f"/proc/{pid}")
            print(json.dumps({"pid": pid, "present": present}))
        atexit.register(look)
        from kernelgate import bytecode
        from kernelgate.sandbox import forkserver
        server = forkserver.server_for(bytecode.child_env(dict(os.environ)))
        seen["pid"] = None if server is None else server.pid
        """
    )
    judge = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=240
    )
    assert judge.returncode == 0, judge.stderr[-2000:]
    seen = json.loads(judge.stdout.strip().splitlines()[-1])
    assert seen["pid"] is not None, judge.stderr[-2000:]
    assert seen["present"] is False
