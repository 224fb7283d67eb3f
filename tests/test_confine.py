"""Confinement of the worker (sandbox/confine.py): candidates that attack the judge from
their worker, and the report of what held.

Each attack test runs with this machine's abilities. It is skipped only when the machine
lacks every mechanism that would stop the attack, and then asserts that the report names
them as missing: a missing mechanism is never silent.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import kernelgate
from kernelgate.errors import CandidateLoadError
from kernelgate.redteam.catalog import ROOT as REDTEAM
from kernelgate.sandbox import confine
from kernelgate.sandbox import session as session_module
from kernelgate.sandbox.session import WorkerSession

ATTEMPTS = "attempts.json"  # the candidate's record of what each attack gave, in its scratch


@pytest.fixture(scope="module")
def abilities() -> dict[str, Any]:
    """What the launcher achieves on this machine, for a command that does nothing (nothing
    when confinement is turned off for this run)."""
    if os.environ.get(confine.ENV_SWITCH) == "off":
        return confine.turned_off()
    scratch = Path(os.environ.get("TMPDIR", "/tmp"))
    read, write = os.pipe()
    policy = confine.Policy(scratch=str(scratch), report_fd=write)
    subprocess.run(
        [sys.executable, "-P", confine.__file__, policy.to_json(), "--", "/bin/true"],
        pass_fds=(write,),
        cwd=scratch,
        check=True,
        timeout=60,
    )
    os.close(write)
    with os.fdopen(read) as handle:
        return json.loads(handle.read())


def _needs(abilities: dict[str, Any], *any_of: str) -> None:
    """Skip unless one of ``any_of`` holds here; when none does, the report says why."""
    if not any(name in abilities["in_force"] for name in any_of):
        for name in any_of:
            assert abilities["missing"].get(name), f"{name} neither in force nor missing"
        pytest.skip(f"none of {any_of} on this machine: {abilities['missing']}")


SYSCTL = "/proc/sys/kernel/core_pattern"  # host-wide: a worker must never write it


def _candidate(tmp_path: Path, attack: str) -> Path:
    """A candidate that runs ``attack`` at import, recording outcomes in ``attempts``."""
    body = textwrap.dedent(attack)
    source = (
        "import json, os, signal, socket, sys, time\nimport torch\n\nattempts = {}\n\n"
        + body
        + f"\n\nwith open({ATTEMPTS!r}, 'w') as handle:\n    json.dump(attempts, handle)\n\n"
        "class ModelNew(torch.nn.Module):\n    def forward(self, a, b):\n        return a + b\n"
    )
    path = tmp_path / "candidate.py"
    path.write_text(source)
    return path


def _run(tmp_path: Path, attack: str, **options: Any) -> tuple[dict[str, str], WorkerSession]:
    scratch = tmp_path / "scratch"
    session = WorkerSession(_candidate(tmp_path, attack), [], timeout=60, scratch=scratch)
    for key, value in options.items():
        setattr(session, key, value)
    with session:
        pass
    return json.loads((scratch / ATTEMPTS).read_text()), session


def _try(name: str, action: str) -> str:
    """Candidate source recording whether ``action`` raised (and how) under ``name``."""
    return (
        f"try:\n    {action}\n    attempts[{name!r}] = 'done'\n"
        f"except Exception as exc:\n    attempts[{name!r}] = type(exc).__name__\n"
    )


# -- attacks ------------------------------------------------------------------------------
def test_candidate_cannot_signal_the_judge_or_processes_outside(tmp_path, abilities) -> None:
    _needs(abilities, "pid-namespace", "landlock-signals")
    bystander = subprocess.Popen(["sleep", "60"])  # stands for any process outside the tree
    try:
        attempts, session = _run(
            tmp_path,
            _try("kill bystander", f"os.kill({bystander.pid}, signal.SIGKILL)")
            + _try("signal judge", f"os.kill({os.getpid()}, 0)")
            + _try("kill parent", "os.kill(os.getppid(), signal.SIGKILL)")
            + _try("kill group", "os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)"),
        )
        time.sleep(0.2)
        assert bystander.poll() is None, "a process outside the worker's tree was killed"
        assert attempts["kill bystander"] != "done"
        assert attempts["signal judge"] != "done"
        # the launcher lived on (had it died, the worker would have died with it and the
        # load would have failed), whatever the kills above answered
        assert set(attempts) >= {"kill parent", "kill group"}
        isolation = session.isolation
        assert isolation is not None
        assert {"pid-namespace", "landlock-signals"} & set(isolation["in_force"])
    finally:
        bystander.kill()
        bystander.wait()


def test_candidate_writes_only_into_its_scratch(tmp_path, abilities) -> None:
    _needs(abilities, "landlock-fs", "readonly-root")
    reference = tmp_path / "reference.py"  # a copy: the real one stays safe if this fails
    reference.write_bytes((REDTEAM / "references" / "vector_add.py").read_bytes())
    before = reference.read_bytes()
    shared = Path("/dev/shm/kernelgate-confine-test")
    shared.unlink(missing_ok=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("judge's file\n")
    source_file = Path(kernelgate.__file__)
    source_before = source_file.stat().st_mtime_ns
    attempts, session = _run(
        tmp_path,
        _try("append reference", f"open({str(reference)!r}, 'a').write('# forged')")
        + _try("overwrite outside", f"open({str(outside)!r}, 'w').write('forged')")
        + _try("new file outside", f"open({str(tmp_path / 'new.txt')!r}, 'w').write('x')")
        + _try("touch kernelgate", f"os.utime({str(source_file)!r})")
        + _try("shared memory", "open('/dev/shm/kernelgate-confine-test', 'w').write('x')")
        + _try("own proc", "open('/proc/self/comm', 'w').write('kg-confined')")
        # the value it already has: harmless should confinement fail
        + _try("sysctl", f"open({SYSCTL!r}, 'w').write(open({SYSCTL!r}).read())")
        + _try("scratch", "open('inside.txt', 'w').write('ok')")
        + _try("dev null", "open('/dev/null', 'w').write('ok')"),
    )
    assert reference.read_bytes() == before
    assert outside.read_text() == "judge's file\n"
    assert not (tmp_path / "new.txt").exists()
    if "readonly-root" in abilities["in_force"]:  # Landlock does not cover metadata
        assert source_file.stat().st_mtime_ns == source_before
        assert attempts["touch kernelgate"] == "OSError"  # EROFS
    # /dev/shm: CUDA needs it writable, so the worker gets a private tmpfs there where it
    # has a mount namespace (written, but never the judge's); else writing is denied
    assert not shared.exists()
    private_shm = "readonly-root" in session.isolation["in_force"]
    assert (
        attempts["shared memory"] == "done" if private_shm else attempts["shared memory"] != "done"
    )
    # /proc: CUDA writes under /proc/self, so a private /proc is writable but for the
    # host-wide knobs (/proc/sys and the like), bound read-only
    assert attempts["sysctl"] != "done"
    if "private-proc" in session.isolation["in_force"]:
        assert attempts["own proc"] == "done"
    assert attempts["scratch"] == "done" and attempts["dev null"] == "done"
    for name in ("append reference", "overwrite outside", "new file outside"):
        assert attempts[name] in ("PermissionError", "OSError"), (name, attempts[name])
    assert {"landlock-fs", "readonly-root"} & set(session.isolation["in_force"])


DETACHED = """
    marker = {marker!r}
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            wait = "for i in $(seq 600); do [ -e {go} ] && break; sleep 0.1; done"
            script = wait + "; echo late > {late}"
            os.execve("/bin/sh", ["sh", "-c", script], {{"KG_MARKER": marker}})
        os._exit(0)
    os.wait()
    attempts["forked"] = "done"
"""


def _marked(marker: str) -> list[int]:
    """Live processes whose environment carries ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                environ = Path(f"/proc/{entry}/environ").read_bytes()
            except OSError:
                continue
            if marker.encode() in environ:
                found.append(int(entry))
    return found


@pytest.mark.parametrize(
    ("mechanism", "skip"),
    [
        # the namespace alone must end the helper (nothing else stops its late write)
        ("pid-namespace", ["landlock-fs", "readonly-root"]),
        ("subreaper", ["pid-namespace", "user-namespace", "landlock-fs", "readonly-root"]),
    ],
)
def test_detached_helper_does_not_outlive_the_worker(
    tmp_path, abilities, mechanism: str, skip: list[str]
) -> None:
    if mechanism == "pid-namespace":
        _needs(abilities, "pid-namespace")
    elif os.environ.get(confine.ENV_SWITCH) == "off":
        pytest.skip("confinement turned off for this run")
    marker = f"kernelgate-confine-{os.getpid()}-{mechanism}"
    late, go = tmp_path / "late.txt", tmp_path / "go"
    attack = DETACHED.format(marker=marker, late=late, go=go)
    attempts, session = _run(tmp_path, attack, confine_skip=skip)
    assert attempts["forked"] == "done"
    assert _marked(marker) == [], "a detached helper outlived the worker"
    go.touch()  # a surviving helper would write now
    time.sleep(1.0)
    assert not late.exists(), "a detached helper wrote after the verification"
    isolation = session.isolation
    assert mechanism in isolation["in_force"], isolation
    assert isolation["missing"]["landlock-fs"] == "skipped by the judge"


def test_candidate_cannot_connect_to_the_judges_machine(tmp_path, abilities) -> None:
    _needs(abilities, "no-network", "landlock-net")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.settimeout(0.5)
    try:
        attempts, session = _run(
            tmp_path,
            _try("connect", f"socket.create_connection(('127.0.0.1', {port}), timeout=2)"),
        )
        assert attempts["connect"] != "done"
        with pytest.raises(TimeoutError):
            listener.accept()
        assert {"no-network", "landlock-net"} & set(session.isolation["in_force"])
    finally:
        listener.close()


def test_connect_ports_open_those_ports_only_and_are_reported(tmp_path, abilities) -> None:
    """What a sanitized worker gets (compute-sanitizer's frontend listens outside): TCP
    connect to the listed ports, nothing else, and landlock-net reported missing."""
    if (abilities.get("landlock_abi") or 0) < 4:
        pytest.skip(f"no Landlock network rules here: {abilities['missing']}")
    allowed, other = socket.create_server(("127.0.0.1", 0)), socket.create_server(("127.0.0.1", 0))
    try:
        ports = [s.getsockname()[1] for s in (allowed, other)]
        attack = _try("allowed", f"socket.create_connection(('127.0.0.1', {ports[0]}), 2)")
        attack += _try("other", f"socket.create_connection(('127.0.0.1', {ports[1]}), 2)")
        attack += _try("bind", f"socket.create_server(('127.0.0.1', {ports[0] + 1}))")
        attempts, session = _run(
            tmp_path, attack, confine_skip=["no-network"], confine_connect_ports=[ports[0]]
        )
        assert attempts == {
            "allowed": "done",
            "other": "PermissionError",
            "bind": "PermissionError",
        }
        missing = session.isolation["missing"]
        assert f"TCP connect allowed to ports {ports[0]}" in missing["landlock-net"]
        assert "landlock-fs" in session.isolation["in_force"]
    finally:
        allowed.close()
        other.close()


def test_candidate_sees_only_its_own_processes(tmp_path, abilities) -> None:
    _needs(abilities, "private-proc")
    attempts, _ = _run(
        tmp_path, "attempts['pids'] = [p for p in os.listdir('/proc') if p.isdigit()]\n"
    )
    pids = sorted(int(p) for p in attempts["pids"])
    assert pids[:2] == [1, 2]  # the namespace's init (the launcher's child), the worker
    assert max(pids) < 100  # its own few processes, none of the host's


# -- honest work and the evidence -----------------------------------------------------------
def test_honest_control_verified_and_evidence_names_the_isolation(abilities) -> None:
    verdict = kernelgate.verify(
        REDTEAM / "references" / "vector_add.py",
        REDTEAM / "controls" / "vector_add.py",
        only=["EXC-01"],
    )
    assert verdict.verdict.value == "verified", verdict.failed_gates
    isolation = verdict.environment["isolation"]
    assert isolation["in_force"] == [m for m in abilities["in_force"] if m in isolation["in_force"]]
    assert set(isolation["in_force"]) == set(abilities["in_force"])
    assert "private-scratch" in isolation["in_force"]
    for name in confine.MECHANISMS:
        assert name in isolation["in_force"] or isolation["missing"].get(name), name


def test_turned_off_is_reported_as_missing(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(confine.ENV_SWITCH, "off")
    attempts, session = _run(tmp_path, "attempts['ran'] = str(os.getpid())\n")
    assert attempts["ran"] != "1"  # not PID 1 of a namespace
    isolation = session.isolation
    assert isolation["in_force"] == ["private-scratch"]
    for name in confine.MECHANISMS:
        if name != "private-scratch":
            assert isolation["missing"][name].startswith("turned off"), name
    assert isolation["level"].startswith("process-only")


def test_unknown_isolation_mode_is_a_clear_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(confine.ENV_SWITCH, "paranoid")
    with pytest.raises(CandidateLoadError, match="KERNELGATE_ISOLATION"):
        WorkerSession(_candidate(tmp_path, ""), []).spawn()


def test_own_scratch_is_removed_and_caches_point_into_it(tmp_path) -> None:
    names = sorted(confine.scratch_env("/x"))
    attack = f"attempts['env'] = {{k: os.environ.get(k, '') for k in {names!r}}}\n"
    attack += "attempts['cwd'] = os.getcwd()\n"
    path = _candidate(tmp_path, attack)
    session = WorkerSession(path, [], timeout=60)
    with session:
        scratch = session.scratch_folder()
        attempts = json.loads((scratch / ATTEMPTS).read_text())
    assert not scratch.exists(), "the session's own scratch folder outlived it"
    assert attempts["cwd"] == str(scratch)
    assert attempts["env"] == confine.scratch_env(str(scratch))


def test_a_library_caching_under_home_loads_and_user_packages_stay_importable(tmp_path) -> None:
    """CuPy compiles into ``~/.cupy/kernel_cache`` at load; under the read-only root the
    judge's own ``~`` is not writable, and honest CuPy candidates failed to load (H200 audit,
    2026-12-04). A worker's ``~`` is its scratch, and ``pip --user`` packages still import."""
    attack = """
    import site
    cache = os.path.join(os.path.expanduser('~'), '.cupy', 'kernel_cache')
    os.makedirs(cache, exist_ok=True)
    with open(os.path.join(cache, 'kernel.cubin'), 'wb') as handle:
        handle.write(b'compiled')
    attempts['home'] = os.path.expanduser('~')
    attempts['user_base'] = site.getuserbase()
    """
    attempts, _ = _run(tmp_path, attack)
    scratch = tmp_path / "scratch"
    assert attempts["home"] == str(scratch)
    assert attempts["user_base"] == confine.USER_BASE


# -- the probe decides whether confinement may be loosened ---------------------------------
def test_failing_candidate_does_not_get_unconfined(tmp_path, abilities, monkeypatch) -> None:
    """A candidate that fails under confinement on purpose stays confined: the trusted probe
    loads here, so the failure is the candidate's."""
    _needs(abilities, "landlock-fs")
    monkeypatch.setattr(session_module, "_LOOSENED", {})
    attack = "open('/tmp/kernelgate-probe-test', 'w')  # refused when confined\n"
    session = WorkerSession(_candidate(tmp_path, attack), [], timeout=60)
    with pytest.raises(CandidateLoadError, match=r"PermissionError|Read-only file system"):
        session.start()
    session.__exit__(None, None, None)
    assert not Path("/tmp/kernelgate-probe-test").exists()
    assert list(session_module._LOOSENED.values()) == [None]


def test_confinement_broken_for_the_probe_is_loosened_and_reported(tmp_path, monkeypatch) -> None:
    """Where the probe itself fails under Landlock (as CUDA might on some host), the
    candidate runs again without it, and ``missing`` says so and why."""
    monkeypatch.setattr(session_module, "_LOOSENED", {})

    def probe_error(device, wrapper, skip, mode):
        loosened = {"landlock-fs", "readonly-root"} <= set(skip)
        return "" if loosened or mode == "off" else "probe: CUDA refused"

    monkeypatch.setattr(session_module, "_probe_error", probe_error)
    attack = "raise_now = not os.path.exists('once')\nopen('once', 'w').close()\n"
    attack += "if raise_now:\n    raise RuntimeError('first load fails')\n"
    path = _candidate(tmp_path, attack)
    session = WorkerSession(path, [], timeout=60, scratch=tmp_path / "scratch")
    with session:
        isolation = session.isolation
    assert "landlock-fs" not in isolation["in_force"]
    assert "readonly-root" not in isolation["in_force"]
    assert "pid-namespace" in isolation["in_force"] or isolation["missing"]["pid-namespace"]
    assert "probe: CUDA refused" in isolation["missing"]["landlock-fs"]
    assert "probe: CUDA refused" in isolation["missing"]["landlock-signals"]


# -- reporting ------------------------------------------------------------------------------
def test_report_is_never_silent_about_a_missing_mechanism() -> None:
    report = confine.Report()
    report.hold("pid-namespace")
    report.lack("landlock-fs", "the kernel has no Landlock")
    data = report.to_dict()
    assert data["in_force"] == ["pid-namespace"]
    assert data["missing"] == {"landlock-fs": "the kernel has no Landlock"}
    assert "level" not in data
    bare = confine.Report(in_force=["private-scratch"], missing={"pid-namespace": "EPERM"})
    assert bare.to_dict()["level"] == "process-only: pid-namespace: EPERM"
    line = confine.summary_line(data)
    assert "pid-namespace" in line and "landlock-fs (the kernel has no Landlock)" in line
    assert confine.summary_line(None) == "isolation: not reported"


def test_weakest_keeps_only_what_held_for_every_worker() -> None:
    strong = {"in_force": ["pid-namespace", "landlock-fs"], "missing": {}, "landlock_abi": 7}
    weak = {"in_force": ["pid-namespace"], "missing": {"landlock-fs": "dropped: probe"}}
    merged = confine.weakest([strong, weak, None])
    assert merged["in_force"] == ["pid-namespace"]
    assert merged["missing"] == {"landlock-fs": "dropped: probe"}
    assert confine.weakest([]) is None


def test_policy_round_trip_and_bad_policy() -> None:
    policy = confine.Policy(scratch="/s", report_fd=5, skip=["landlock-fs"])
    assert confine.Policy.from_json(policy.to_json()) == policy
    with pytest.raises(ValueError, match="scratch"):
        confine.Policy.from_json("[]")
    done = subprocess.run(
        [sys.executable, "-P", confine.__file__, "{}", "--", "/bin/true"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2 and "bad policy" in done.stderr


def test_writable_devices_are_cuda_and_standard_only() -> None:
    devices = confine.writable_devices()
    assert "/dev/null" in devices
    assert not any(d.startswith("/dev/shm") or d.startswith("/dev/pts") for d in devices)
    for device in devices:
        name = device.removeprefix("/dev/")
        assert name in confine.STANDARD_DEVICES or name.startswith("nvidia"), device


def test_launcher_passes_the_workers_exit_and_signal_on(tmp_path) -> None:
    policy = confine.Policy(scratch=str(tmp_path)).to_json()
    launcher = [sys.executable, "-P", confine.__file__, policy, "--"]
    exited = subprocess.run([*launcher, "/bin/sh", "-c", "exit 3"], cwd=tmp_path, timeout=30)
    assert exited.returncode == 3  # the worker's "sticky device fault" code survives
    segfault = [sys.executable, "-c", "import ctypes; ctypes.string_at(0)"]
    killed = subprocess.run([*launcher, *segfault], cwd=tmp_path, timeout=30)
    assert killed.returncode == -signal.SIGSEGV  # a crash reads as a crash, PID 1 or not


def test_stale_cgroup_folders_of_dead_launchers_are_swept_and_never_collided_with(
    tmp_path: Path,
) -> None:
    """A launcher killed before it removes its pids cgroup leaves the folder behind; a
    later launcher with the same pid once failed to create its own (EEXIST) and its worker
    lost the process bound. Folders now carry a token, and the empty folders of launchers
    no longer alive are removed."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead = int(done.stdout)
    names = {
        f"kernelgate-{dead}": False,  # the old naming, dead owner, empty: swept
        f"kernelgate-{dead}-0a0b0c0d": False,  # dead owner, empty: swept
        f"kernelgate-{os.getpid()}-11223344": True,  # a live launcher's: kept
        f"kernelgate-{dead}-deadbeef": True,  # not empty (a cgroup with tasks): kept
        "other-123": True,  # not ours: kept
    }
    for name in names:
        (tmp_path / name).mkdir()
    (tmp_path / f"kernelgate-{dead}-deadbeef" / "task").write_text("")
    confine.sweep_stale_cgroups(str(tmp_path))
    assert {name: (tmp_path / name).exists() for name in names} == names
