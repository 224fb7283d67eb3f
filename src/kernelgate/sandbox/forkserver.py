"""A worker fork server: one clean process that has imported the worker, forking workers.

Why: a fresh worker is ``python -m kernelgate.sandbox.worker`` under the confinement
launcher, and its imports (torch, the worker's modules) cost ~3 CPU s before it loads
anything; the CPU test suite and an audit start hundreds of workers on a few cores. The
server pays those imports once per judge process; each worker is then a ``fork`` of it,
the imported modules shared copy-on-write. It reuses the judge zygote's machinery
(audit/zygote.py: the fork loop, the exit reports, ``subprocess.Popen``'s surface for each
child, dying together), with a different child.

What the server holds: the worker's modules, imported in a process started with the
worker's environment (less the per-worker variables, ``PER_WORKER_ENV``), and nothing else.
No judge state, no inputs, no candidate: the candidate arrives later, by path, in the load
request the judge sends over the worker's own pipes. The server refuses to serve (and
every worker starts fresh) where its imports initialised CUDA, started a thread, or left a
shared writable mapping (``shared_writable_mappings``: a forked worker would share it with
the server and its siblings). It serves CPU workers, and device workers where
``KERNELGATE_WORKER_FORK_DEVICE=1`` (``serves``: opt-in until measured on the device); never a
worker with a wrapper (compute-sanitizer must start the process).

What each forked child does (``become_worker``), so that the worker it becomes equals one
started fresh: a session of its own, stdin from /dev/null and stdout/stderr to the
session's log, the worker's cwd (its scratch) and exact environment, every descriptor but
those closed; then the confinement launcher's own steps (``confine.launch``, in this
process: the same rlimits, namespaces, mounts, Landlock, report), and in the confined
grandchild, in place of ``execv``, what ``execv`` would have done (close the descriptors
marked close-on-exec), the thread pools a fresh process would have, fresh random state, then
``Worker.serve`` and the interpreter's exit (threads joined, ``atexit``). The child dies with
the server, the server with the judge (``PR_SET_PDEATHSIG``).

Trust: a confined worker cannot reach the server. The server is outside the worker's PID
namespace and Landlock domain (no signal, no ptrace, no /proc view), the worker holds no
descriptor of it, and the memory it shares with the server and its siblings is private
copy-on-write. Where confinement is off, a worker could signal the server as it could the
judge itself: nothing is weaker than a fresh start.

The first worker of a judge process starts the server and waits for its imports (what a
fresh worker would import anyway). ``KERNELGATE_WORKER_FORK=0`` starts every worker fresh,
as before; any failure of the server (it cannot start, refuses, dies, or does not answer)
does the same, said once on stderr.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NoReturn

from kernelgate.audit import zygote
from kernelgate.audit.processes import die_with_parent, kill_tree
from kernelgate.sandbox import confine
from kernelgate.tune.knobs import VALUES_ENV as KNOB_VALUES_ENV

ENABLE_ENV = "KERNELGATE_WORKER_FORK"  # "0": every worker is a fresh process
# "1": device workers are forked too (opt-in until measured on the device; ``serves``)
DEVICE_ENV = "KERNELGATE_WORKER_FORK_DEVICE"
# Set for each worker, never read at import: one server serves workers that differ in them
# (pytest sets PYTEST_CURRENT_TEST for every test; each session has its scratch).
PER_WORKER_ENV = (
    *confine.scratch_env("").keys(),
    KNOB_VALUES_ENV,
    "PYTEST_CURRENT_TEST",
    ENABLE_ENV,
    DEVICE_ENV,
)
# The server's own stdout and stderr: a refusal says why on the socket, and its children
# write to their sessions' logs, so nothing is kept (no shared file in /tmp to point at).
LOG = Path(os.devnull)


def shared_writable_mappings() -> str | None:
    """Why the server must not fork (a shared writable mapping: a forked worker would write
    into the server's and its siblings' memory), or None."""
    try:
        with open("/proc/self/maps") as maps:
            shared = [line.strip() for line in maps if line.split()[1][1::2] == "ws"]
    except (OSError, IndexError):
        return "its memory map cannot be read"
    return f"shared writable mappings after its imports: {shared[:3]}" if shared else None


def preload() -> None:
    """Import what a fresh worker imports before it reads its first request, and nothing
    more (Triton stays out: the worker forks its offline compiler before Triton loads)."""
    import kernelgate.sandbox.worker  # noqa: F401  (points stdout at stderr, as fresh)


# -- in the forked child ------------------------------------------------------------------


def _close_on_exec() -> None:
    """Close what ``execv`` would: every descriptor marked close-on-exec."""
    import fcntl

    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        with contextlib.suppress(OSError):
            if fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC:
                os.close(fd)


_CAPABILITY_VERSION_3 = 0x20080522  # linux/capability.h
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _capabilities_as_after_exec() -> None:
    """The capabilities ``execv`` of the (file-capability-less) Python would leave: for
    uid 0 the permitted and effective sets become the bounding set (emptied by the
    launcher's ``no-capabilities``), for any other uid nothing; ambient ones are cleared.
    Without this a forked worker would keep every capability its new user namespace gave
    it (a worker could then, say, remount its read-only root in its own mount namespace)."""
    libc = ctypes.CDLL(None, use_errno=True)
    header = _CapHeader(_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    bounding = 0
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapBnd:"):
            bounding = int(line.split()[1], 16)
    for half in range(2):
        kept = (bounding >> (32 * half)) & 0xFFFFFFFF if os.geteuid() == 0 else 0
        data[half].permitted &= kept
        data[half].effective = data[half].permitted
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)  # absent: nothing to clear
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _fresh_random_state() -> None:
    """The random state a fresh process starts with: ``random`` reseeds itself after a fork,
    numpy's global generator (seeded at import, in the server) is reseeded here."""
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()


def run_worker(fd_in: int, fd_out: int) -> NoReturn:
    """Become the worker, as ``python -P -m kernelgate.sandbox.worker FD_IN FD_OUT`` after
    its imports would be, and never return."""

    def life() -> None:
        _close_on_exec()  # what execv would have done, first
        _capabilities_as_after_exec()
        zygote.apply_record_env(dict(os.environ))  # thread pools read from it at import
        tempfile.tempdir = None  # TMPDIR is the worker's scratch, read on first use
        _fresh_random_state()
        from kernelgate.sandbox import worker

        sys.argv = [str(worker.__file__), str(fd_in), str(fd_out)]
        sys.modules["__main__"] = worker  # as under ``-m`` (multiprocessing's spawn reads it)
        try:
            worker.main()
        finally:
            threading._shutdown()  # type: ignore[attr-defined]  # the interpreter's exit:
            atexit._run_exitfuncs()  # non-daemon threads joined, then atexit

    zygote.live_then_exit(life)


def become_worker(order: dict[str, Any], fds: list[int], inherited: list[int]) -> NoReturn:
    """In the child the server forked for ``order``: set up as ``Popen`` would for a fresh
    worker, then confine (``confine.launch``) and run the worker; never returns.

    ``fds``: the session's log, the worker's two pipe ends, and (confined) the launcher's
    report pipe; ``order``: ``env``, ``cwd``, ``policy`` (the launcher's, JSON; None where
    confinement is off)."""

    def life() -> int:
        server = os.getppid()
        os.setsid()  # Popen's start_new_session: the judge kills the worker by its group
        die_with_parent(server)
        log, fd_in, fd_out, *report = fds
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        keep = {0, 1, 2, fd_in, fd_out, *report}
        for fd in {null, log, *inherited}:
            if fd not in keep:
                with contextlib.suppress(OSError):
                    os.close(fd)
        for fd in (fd_in, fd_out, *report):  # passed as Popen's pass_fds are
            os.set_inheritable(fd, True)
        os.chdir(order["cwd"])
        os.environ.clear()
        os.environ.update(order["env"])

        def start() -> NoReturn:
            run_worker(fd_in, fd_out)

        if order.get("policy") is None:
            run_worker(fd_in, fd_out)
        policy = confine.Policy.from_json(order["policy"])
        policy.report_fd = report[0]
        return confine.end_as(confine.launch(policy, [sys.executable], start))

    zygote.live_then_exit(life)


def main(fd: int, judge: int) -> None:
    """The server: die with the judge, import the worker, check it may fork, serve."""
    die_with_parent(judge)
    checks = (shared_writable_mappings,)
    zygote.load_then_serve(socket.socket(fileno=fd), preload, become_worker, checks)


# -- the judge's side ------------------------------------------------------------------------


class WorkerForkServer(zygote.Zygote):
    """The judge's handle on its worker fork server: ``start_worker`` forks a worker and
    returns it with the surface of ``subprocess.Popen`` that the session uses."""

    child_label = "kernelgate.sandbox.worker(forked)"

    def command(self, fd: int) -> list[str]:
        # -P as the worker's (no folder of the judge's on sys.path); -c rather than -m:
        # importing the kernelgate package imports this module already
        judge = os.getpid()
        entry = f"from kernelgate.sandbox.forkserver import main; main({fd}, {judge})"
        return [sys.executable, "-P", "-c", entry]

    @staticmethod
    def key_of(env: Mapping[str, str]) -> tuple[Any, ...]:
        """Workers whose environments differ only in ``PER_WORKER_ENV`` share a server."""
        return tuple(sorted((k, v) for k, v in env.items() if k not in PER_WORKER_ENV))

    def start_worker(
        self,
        env: Mapping[str, str],
        cwd: Path,
        policy: confine.Policy | None,
        log: int,
        pipes: tuple[int, int],
        report: int | None,
    ) -> zygote.ForkedJudge:
        """Fork a worker (see ``become_worker``); raises ``zygote.ZygoteUnavailable`` where
        it cannot (the caller starts a fresh one)."""
        order = {
            "env": dict(env),
            "cwd": str(cwd),
            "policy": None if policy is None else policy.to_json(),
        }
        fds = [log, *pipes, *([] if report is None else [report])]
        return self.fork(order, fds)

    def serving(self) -> bool:
        """Whether its imports are done and it forks (never waits)."""
        return self._ready.is_set() and self.failure is None

    def child(self, pid: int) -> zygote.ForkedJudge | None:
        """The forked worker ``pid``, not yet collected, or None."""
        with self._lock:
            return self._judges.get(pid)


_lock = threading.Lock()
_current: WorkerForkServer | None = None
_servers: list[WorkerForkServer] = []  # every server this process started
_said = False


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "1").strip() != "0"


def serves(device: str) -> bool:
    """Whether a worker for ``device`` may be forked by the server (else it starts fresh).

    CPU workers: unless switched off. Device workers only with ``DEVICE_ENV=1``. The server
    never touches CUDA (it refuses to serve where its imports initialised it), so a forked
    worker creates its own CUDA context after the fork, as a fresh one does, and skips the
    imports (torch, the worker's modules: about 2-3 CPU s a worker, several workers a
    record). On the H200 an audit's workers took 863 CPU s in 300 s beside the judges'
    1,458 (benchmarks/results/audit-slices-h200-2026-12-04-s12.json); whether forking them
    pays there, and that every device gate judges a forked worker as a fresh one, is to be
    measured on the device before this becomes the default (tests/test_gpu_worker_fork.py).
    """
    if not enabled():
        return False
    return device == "cpu" or os.environ.get(DEVICE_ENV, "0").strip() == "1"


def say_fallback(reason: str) -> None:
    """Say on stderr, once a judge process, that its workers start as fresh processes."""
    global _said
    with _lock:
        if _said:
            return
        _said = True
    print(f"kernelgate: workers start as fresh processes ({reason})", file=sys.stderr, flush=True)


def server_for(env: Mapping[str, str]) -> WorkerForkServer | None:
    """The fork server for workers with ``env`` (started now for the first of them, and
    waited for), or None: this worker starts fresh. A server that failed is not started
    again (said once); one for another environment is retired (its running workers finish).

    Why wait rather than start the first worker fresh beside the server: the server's
    imports are a fresh worker's, so a judge that starts even one worker pays about the
    same CPU either way, and every later worker is forked; a fresh worker beside the server
    is paid twice (measured: the hostile suite, one CLI judge per attack, took 19% more CPU
    that way than with no server at all).
    """
    global _current
    if not enabled():
        return None
    key = WorkerForkServer.key_of(env)
    with _lock:
        server = _current
        if server is None or (server.key != key and server.failure is None):
            if server is not None:
                server.retire()
            server_env = {k: v for k, v in env.items() if k not in PER_WORKER_ENV}
            server = _current = WorkerForkServer(server_env, LOG)
            _servers.append(server)
    if not server.ready():
        say_fallback(f"the worker fork server failed: {server.failure}")
        return None
    return server


def running_servers() -> list[int]:
    """Pids of the fork servers this process started that may still run."""
    with _lock:
        return [s.pid for s in _servers if s.pid is not None and s.failure is None]


def stop_servers(seconds: float = zygote.GONE_SECONDS) -> None:
    """End every fork server this process started, with its workers, and return once each
    is reaped. Registered with ``atexit``: a server otherwise dies with its judge only
    through ``PR_SET_PDEATHSIG``, a moment after the judge is gone, and whoever started the
    judge would find a process of it still running (a judge is done when it returns)."""
    global _current
    with _lock:
        servers = list(_servers)
        _servers.clear()
        _current = None
    for server in servers:
        server.stop(seconds)


atexit.register(stop_servers)


def end_open_workers(describe: Callable[[int], str | None], seconds: float) -> list[str]:
    """Kill every worker a fork server of this process still runs (a session left open)
    with its tree, and collect it (the server reaps it); returns ``describe`` of each one
    that was running. For the end of a verification (audit/settled.py): the servers stay,
    holding nothing of it."""
    with _lock:
        servers = list(_servers)
    killed: list[str] = []
    for server in servers:
        for pid in server.running():
            described = describe(pid)
            if described is not None:
                killed.append(described)
            kill_tree(pid)
        for pid in server.running():
            child = server.child(pid)
            if child is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    child.wait(seconds)
    return killed
