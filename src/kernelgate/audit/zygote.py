"""A judge zygote: one process that has imported the judge, forking a judge per record.

Why: a record's judge is a fresh process (``judge.py`` says why), and on the H200 a fresh
Python that imports torch and kernelgate spends ~2.3 s of a ~10 s verdict before judging
anything, on the cores that a dozen parallel judges share. The zygote pays those imports
once per audit process; each record's judge is then a ``fork`` of it, milliseconds, with the
imported modules shared copy-on-write.

The zygote is the judge's trusted side: it imports the judge's modules and runs nothing
else. No candidate code, no CUDA call, no thread ever runs in it (forking a threaded process
can leave a child with a lock held by a thread that is not there; the zygote checks that it
is single-threaded after its imports, and refuses to serve otherwise). numpy's OpenBLAS
starts its thread pool at import, so the zygote imports with ``OPENBLAS_NUM_THREADS=1`` and
each judge sets the pool a fresh process would have had (``apply_record_env``).

Who is whose child. The audit starts the zygote (``Zygote``), lazily, for the first judge it
needs; the zygote forks the judges, so it is their parent: it waits for them, and reports
each exit status to the audit over a ``SOCK_SEQPACKET`` socket pair. The audit sees each
judge through ``ForkedJudge``, which has the surface of ``subprocess.Popen`` that the audit
uses (``pid``, ``poll``, ``wait(timeout)`` raising ``TimeoutExpired``, ``returncode``, with
minus the signal number for a judge a signal ended). As with Popen, the judge stays a
zombie until the audit has collected its status (``waitid(WNOWAIT)``, then a ``reap``
message from ``ForkedJudge``), so the pid the audit holds never names another process.

Dying together. The zygote dies with the audit (``PR_SET_PDEATHSIG``, set by the zygote on
itself; the audit starts it from a thread that lives as long as it does, since the signal
follows the thread that forked). Each judge dies with the zygote, the same way, so a dead
audit takes its zygote and every judge with it, whatever the zygote was doing. A zygote that
dies while the audit runs takes its judges along: the audit kills their trees, reports them
killed (``SIGKILL``, so the runner judges those records again), and starts every later judge
as a fresh process. So does an audit whose zygote cannot start, or one run with
``KERNELGATE_ZYGOTE=0``; it says so once on stderr.

A forked judge behaves as ``python -m kernelgate.audit.judge REQUEST RESULT``: a process
group of its own, stdin from /dev/null, stdout and stderr to its record's log, the record's
environment in ``os.environ`` before anything could read it (and the thread counts that
torch and OpenBLAS read from it at import applied through their own calls), then
``judge._main`` with the same ``kill_descendants`` and ``os._exit`` as its ``__main__``.
It re-reads its record from request.json: the zygote holds nothing of any record.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, NoReturn

from kernelgate.audit.processes import (
    PARENT_ENV,
    die_with_audit_parent,
    die_with_parent,
    kill_descendants,
    kill_tree,
)

ENABLE_ENV = "KERNELGATE_ZYGOTE"  # "0": every judge is a fresh process, as before
# set for each record (the GPU, the record's share of the cores): one zygote serves them all
PER_RECORD_ENV = ("CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")
BLAS_THREAD_ENVS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
LOG_NAME = "zygote.log"  # in the audit's folder: the zygote's own stderr (import failures)
START_SECONDS = 180.0  # for the zygote's imports (a cold bytecode cache compiles torch)
FORK_SECONDS = 30.0  # for the zygote to answer a fork request
GONE_SECONDS = 5.0  # for a judge to die once its zygote has
POLL_SECONDS = 0.2  # the zygote's look at its judges where pidfds are unavailable
MESSAGE_BYTES = 1 << 20
MAX_FDS = 8  # descriptors one fork order may carry (a judge's log; a worker's pipes)

# What a forked child becomes (it never returns): the order, the descriptors the order
# carried, and the zygote's own descriptors, which the child must close.
Become = Callable[[dict[str, Any], list[int], list[int]], NoReturn]


class ZygoteUnavailable(Exception):
    """The zygote cannot fork this judge (the caller starts a fresh process instead)."""


# -- what the zygote imports, and what each judge changes after the fork ---------------------


def preload() -> None:
    """Import what every readable record's judge imports (``judge_record``'s lazy imports
    included), and nothing more: a forked judge then imports what a fresh one would, later.
    Nothing here initialises CUDA or starts a thread (``threads`` checks it)."""
    import resource  # noqa: F401  (peak_memory)
    import shlex  # noqa: F401  (judge_record)

    import torch

    # The contract's meta runs (derivation, admission's sizing, CMP-03's footprints: torch's
    # Python refs for meta tensors, FlopCounterMode) import dynamo, and with it sympy,
    # inductor and triton, on first use: 2.5-3 s of a record's judge. (The judge's own
    # dispatch modes do not: oracle/modes.py.)
    import torch._dynamo  # noqa: F401

    import kernelgate.audit.judge
    import kernelgate.errors
    import kernelgate.formats.kernelbench
    import kernelgate.pipeline  # noqa: F401  (the gates, oracle, contract, sandbox)


def threads() -> int:
    """Threads of this process now (1 where it cannot be read: not Linux)."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return 1


def _positive(value: str | None) -> int | None:
    try:
        number = int(value or "")
    except ValueError:
        return None
    return number if number > 0 else None


def blas_threads_wanted(env: Mapping[str, str]) -> int:
    """The OpenBLAS pool a fresh process with ``env`` starts with: the first positive of
    ``OPENBLAS_NUM_THREADS``, ``GOTO_NUM_THREADS``, ``OMP_NUM_THREADS``, else every core it
    may run on, never more than those cores (OpenBLAS's own rule at load)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    cores = max(1, cores or 1)
    for name in BLAS_THREAD_ENVS:
        wanted = _positive(env.get(name))
        if wanted is not None:
            return min(wanted, cores)
    return cores


def _openblas() -> tuple[Any, Any] | None:
    """(get, set) of the number of threads of the OpenBLAS this process loaded, or None."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower()}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix, suffix in (("scipy_", "64_"), ("", "64_"), ("", ""), ("scipy_", "")):
            getter = getattr(library, f"{prefix}openblas_get_num_threads{suffix}", None)
            setter = getattr(library, f"{prefix}openblas_set_num_threads{suffix}", None)
            if getter is not None and setter is not None:
                return getter, setter
    return None


def apply_record_env(env: Mapping[str, str]) -> None:
    """Make this forked judge's environment ``env``, as a fresh process started with it has.

    ``os.environ`` is replaced before anything of the record runs, so CUDA (not initialised
    in the zygote) sees the record's ``CUDA_VISIBLE_DEVICES`` and the judge's own children
    inherit exactly ``env``. What libraries read from the environment once, at import, in
    the zygote, is set through their calls: torch's (OpenMP's and MKL's) thread count from
    ``OMP_NUM_THREADS``, and OpenBLAS's pool (``blas_threads_wanted``).
    """
    os.environ.clear()
    os.environ.update(env)
    import torch

    omp = _positive(env.get("OMP_NUM_THREADS"))
    if omp is not None and torch.get_num_threads() != omp:
        torch.set_num_threads(omp)
    blas = _openblas()
    if blas is not None:
        get, set_ = blas
        wanted = blas_threads_wanted(env)
        if get() != wanted:
            set_(wanted)


def zygote_env(env: Mapping[str, str]) -> dict[str, str]:
    """The zygote's own environment: a judge's, with OpenBLAS's pool at one thread (it
    starts at import; the zygote must stay single-threaded)."""
    return {**env, "OPENBLAS_NUM_THREADS": "1"}


def zygote_key(env: Mapping[str, str]) -> tuple[Any, ...]:
    """What one zygote's judges share: their environment but for the per-record variables
    (whether ``OMP_NUM_THREADS`` is set is shared: torch's default without it is its own)."""
    shared = sorted((k, v) for k, v in env.items() if k not in PER_RECORD_ENV)
    return (tuple(shared), "OMP_NUM_THREADS" in env)


# -- the zygote process ------------------------------------------------------------------------


def _send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.send(json.dumps(message).encode())


def _exit_status(pid: int) -> int | None:
    """The exit status of child ``pid`` if it has exited (Popen's returncode), leaving it a
    zombie until the audit asks for it to be reaped; None while it runs."""
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    if info is None or info.si_pid == 0:
        return None
    return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status


def live_then_exit(life: Callable[[], int | None]) -> NoReturn:
    """A forked child's whole life: ``life()``'s return (or SystemExit) code, 1 with the
    traceback printed on any other exception, then streams flushed and ``os._exit``. A fork
    must never return into its parent's stack, and threads a reference or candidate left
    running must not hold it."""
    code = 1
    try:
        code = life() or 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def _become_judge(order: dict[str, Any], fds: list[int], inherited: list[int]) -> NoReturn:
    """In the forked child: become the record's judge, as ``python -m kernelgate.audit.judge``
    would be, and never return."""

    def life() -> None:
        log_fd = fds[0]
        zygote = os.getppid()
        os.setpgid(0, 0)  # a terminal's Ctrl-C reaches the audit alone (judge_isolated)
        die_with_parent(zygote)  # the zygote dies with the audit: so does this judge
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        for fd in {null, log_fd, *inherited}:
            if fd > 2:
                with contextlib.suppress(OSError):
                    os.close(fd)
        env = dict(order["env"])
        env[PARENT_ENV] = str(zygote)  # whom ``_main``'s die_with_audit_parent checks: us
        apply_record_env(env)
        from kernelgate.audit import judge

        request, result = order["request"], order["result"]
        sys.argv = [str(judge.__file__), request, result]
        sys.modules["__main__"] = judge  # as under ``-m`` (multiprocessing's spawn reads it)
        try:
            judge._main(request, result, via="zygote")
        finally:
            kill_descendants()  # nothing of the record outlives its judge

    live_then_exit(life)


def serve(sock: socket.socket, become: Become = _become_judge) -> None:
    """The zygote's loop: fork a judge per request, report each exit, reap when told.

    Single-threaded by design: it waits on the socket and on each judge's pidfd (or looks
    every ``POLL_SECONDS`` where there are none). The audit going away (end of file) ends it
    after killing what it forked. ``become``: what each forked child turns into (the worker
    fork server, sandbox/forkserver.py, forks workers with this same loop).
    """
    running: dict[int, int | None] = {}  # judge pid -> its pidfd
    reported: set[int] = set()  # exited, status sent, not yet reaped
    retiring = False
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    while not (retiring and not running and not reported):
        exact = all(fd is not None for fd in running.values())
        for fd, _ in poller.poll(None if exact else POLL_SECONDS * 1000):
            if fd != sock.fileno():
                continue
            try:
                data, fds, _, _ = socket.recv_fds(sock, MESSAGE_BYTES, MAX_FDS)
            except OSError:
                data, fds = b"", []
            if not data:  # the audit is gone (it would have killed us; belt and braces)
                for pid in running:
                    kill_tree(pid)
                return
            message = json.loads(data)
            op = message.get("op")
            if op == "fork":
                if retiring or not fds:
                    for extra in fds:
                        os.close(extra)
                    _send(sock, {"id": message["id"], "error": "zygote retiring"})
                    continue
                inherited = [sock.fileno(), *(p for p in running.values() if p is not None)]
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    become(message, fds, inherited)
                for fd in fds:
                    os.close(fd)
                try:
                    pidfd: int | None = os.pidfd_open(pid)
                    poller.register(pidfd, select.POLLIN)
                except (OSError, AttributeError):
                    pidfd = None
                running[pid] = pidfd
                _send(sock, {"id": message["id"], "pid": pid})
            elif op == "reap" and message.get("pid") in reported:
                os.waitpid(message["pid"], 0)
                reported.discard(message["pid"])
            elif op == "retire":
                retiring = True
        for pid, pidfd in list(running.items()):
            status = _exit_status(pid)
            if status is None:
                continue
            if pidfd is not None:
                poller.unregister(pidfd)
                os.close(pidfd)
            del running[pid]
            reported.add(pid)
            _send(sock, {"exited": pid, "status": status})


def main(fd: int) -> None:
    """The zygote: die with the audit, import the judge, check that CUDA is untouched and
    that it is alone (one thread), then serve."""
    die_with_audit_parent()
    load_then_serve(socket.socket(fileno=fd), preload, _become_judge)


def load_then_serve(
    sock: socket.socket,
    load: Callable[[], None],
    become: Become,
    checks: Sequence[Callable[[], str | None]] = (),
) -> None:
    """Import (``load``), refuse to serve where forking would not give clean children
    (CUDA initialised, more than one thread, or any of ``checks`` says why not), else say
    ready and serve."""
    try:
        load()
    except BaseException:
        _send(sock, {"refused": "its imports failed: " + traceback.format_exc(limit=3)})
        return
    import torch

    if torch.cuda.is_initialized():  # a forked child cannot use a parent's CUDA context
        _send(sock, {"refused": "CUDA was initialised by its imports"})
        return
    count = threads()
    if count != 1:
        names = []
        for task in sorted(os.listdir("/proc/self/task")):
            with contextlib.suppress(OSError):
                names.append(Path(f"/proc/self/task/{task}/comm").read_text().strip())
        _send(sock, {"refused": f"{count} threads after its imports ({', '.join(names)})"})
        return
    for check in checks:
        reason = check()
        if reason:
            _send(sock, {"refused": reason})
            return
    _send(sock, {"ready": os.getpid()})
    serve(sock, become)


# -- the audit's side --------------------------------------------------------------------------


class ForkedJudge:
    """A judge the zygote forked, with the surface of ``subprocess.Popen`` that the audit
    uses: ``pid``, ``returncode``, ``poll()``, ``wait(timeout)``."""

    def __init__(self, pid: int, zygote: Zygote, args: list[str]) -> None:
        self.pid = pid
        self.args = args
        self.returncode: int | None = None
        self.note: str | None = None  # why it ended, where the zygote's death ended it
        self._zygote = zygote
        self._status: int | None = None
        self._exited = threading.Event()

    def _ended(self, status: int, note: str | None = None) -> None:
        self._status, self.note = status, note
        self._exited.set()

    def _collect(self) -> int:
        if self.returncode is None:
            assert self._status is not None
            self.returncode = self._status
            self._zygote.reap(self.pid)  # from now on the pid may name another process
        return self.returncode

    def poll(self) -> int | None:
        return self._collect() if self._exited.is_set() else None

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self._collect()


class _Reply:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.judge: ForkedJudge | None = None
        self.error: str | None = None
        self.abandoned = False


class Zygote:
    """The audit's handle on one zygote process (see the module docstring).

    One thread, started here, starts the zygote and reads everything it says until it ends:
    the thread that forks a child is the one whose end ``PR_SET_PDEATHSIG`` follows, so this
    thread, which lives as long as the zygote, is the one that starts it.
    """

    child_label = "kernelgate.audit.judge(zygote)"  # a forked child's ``args``

    def __init__(self, env: Mapping[str, str], log_path: Path) -> None:
        self.key = self.key_of(env)
        self.failure: str | None = None  # why it cannot serve (set once, never cleared)
        self.pid: int | None = None
        self._log_path = log_path
        self._env = zygote_env(env)
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._ids = 0
        self._replies: dict[int, _Reply] = {}
        self._judges: dict[int, ForkedJudge] = {}
        self._ready = threading.Event()
        self._retiring = False
        self._thread = threading.Thread(target=self._run, name="kernelgate-zygote", daemon=True)
        self._thread.start()

    def ready(self, timeout: float = START_SECONDS) -> bool:
        """Wait until the zygote serves (True) or cannot (False, ``failure`` says why)."""
        if not self._ready.wait(timeout):
            self._fail(f"not ready within {timeout:g} s")
            if self.pid is not None:
                kill_tree(self.pid)
        return self.failure is None

    def command(self, fd: int) -> list[str]:
        """The zygote process's command line; ``fd``: its end of the socket pair."""
        return [sys.executable, "-m", "kernelgate.audit.zygote", str(fd)]

    @staticmethod
    def key_of(env: Mapping[str, str]) -> tuple[Any, ...]:
        """What the children of one zygote share (``zygote_key`` for judges)."""
        return zygote_key(env)

    def spawn(
        self, request: Path, result: Path, log: IO[bytes], env: Mapping[str, str]
    ) -> ForkedJudge:
        """Fork the judge of ``request``, writing to ``log``, with ``env``; raises
        ``ZygoteUnavailable`` where it cannot (the caller starts a fresh process)."""
        order = {"request": str(request), "result": str(result), "env": dict(env)}
        return self.fork(order, [log.fileno()])

    def fork(self, order: Mapping[str, Any], fds: Sequence[int]) -> ForkedJudge:
        """Fork a child for ``order`` (what the zygote's ``become`` reads), handing it
        copies of ``fds``; raises ``ZygoteUnavailable`` where it cannot."""
        reply = _Reply()
        with self._lock:
            if self.failure is not None or self._sock is None or self._retiring:
                raise ZygoteUnavailable(self.failure or "retiring")
            self._ids += 1
            ident = self._ids
            self._replies[ident] = reply
            message = {**order, "op": "fork", "id": ident}
            try:
                socket.send_fds(self._sock, [json.dumps(message).encode()], list(fds))
            except OSError as exc:
                self._replies.pop(ident, None)
                raise ZygoteUnavailable(f"cannot reach it ({exc})") from None
        if not reply.done.wait(FORK_SECONDS):
            with self._lock:
                reply.abandoned = True  # a late answer's judge is killed (``_read``)
                late = reply.judge
            if late is None:
                self._fail(f"no answer to a fork within {FORK_SECONDS:g} s")
                raise ZygoteUnavailable(self.failure or "no answer")
        if reply.judge is None:
            raise ZygoteUnavailable(reply.error or "no judge")
        return reply.judge

    def reap(self, pid: int) -> None:
        """Let the zygote reap ``pid``, whose status the audit has collected."""
        with self._lock:
            self._judges.pop(pid, None)
            if self._sock is not None:
                with contextlib.suppress(OSError):
                    _send(self._sock, {"op": "reap", "pid": pid})

    def retire(self) -> None:
        """Fork no more; the zygote ends once its running judges have."""
        with self._lock:
            self._retiring = True
            if self._sock is not None:
                with contextlib.suppress(OSError):
                    _send(self._sock, {"op": "retire"})

    def stop(self, seconds: float = GONE_SECONDS) -> None:
        """End the process now, with whatever it forked, and return once it is reaped (its
        reader thread waits for it), or after ``seconds``."""
        self.retire()
        if self.pid is not None:
            kill_tree(self.pid)
        if self._thread is not threading.current_thread():
            self._thread.join(seconds)

    def running(self) -> list[int]:
        """Pids of the judges forked and not yet collected."""
        with self._lock:
            return list(self._judges)

    def _fail(self, reason: str) -> None:
        with self._lock:
            if self.failure is None and not self._retiring:
                self.failure = reason
        self._ready.set()

    def _run(self) -> None:
        process: subprocess.Popen[bytes] | None = None
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(self._log_path, "ab") as log:
                process = subprocess.Popen(
                    self.command(theirs.fileno()),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env=self._env,
                    pass_fds=(theirs.fileno(),),
                    process_group=0,  # a terminal's Ctrl-C is the audit's to handle
                )
            self.pid = process.pid
        except BaseException as exc:  # a patched Popen (tests) raises anything
            self._fail(f"cannot start it ({exc!r})")
            ours.close()
            return
        finally:
            theirs.close()
        try:
            self._read(ours)
        finally:
            with self._lock:
                self._sock = None
            ours.close()
            kill_tree(process.pid)  # reaped before its judges are reported: nothing left
            process.wait()
            self._lost()

    def _read(self, sock: socket.socket) -> None:
        """Everything the zygote says, until it ends."""
        while True:
            try:
                data = sock.recv(MESSAGE_BYTES)
            except OSError:
                data = b""
            if not data:
                if not self._ready.is_set():
                    self._fail("it ended before it was ready (see zygote.log)")
                else:
                    self._fail("it died")
                return
            message = json.loads(data)
            if "ready" in message:
                with self._lock:
                    self._sock = sock
                self._ready.set()
            elif "refused" in message:
                self._fail(f"it refused to serve: {message['refused']}")
                return
            elif "exited" in message:
                with self._lock:
                    judge = self._judges.get(message["exited"])
                if judge is not None:
                    judge._ended(int(message["status"]))
            elif "id" in message:
                self._answered(message)

    def _answered(self, message: dict[str, Any]) -> None:
        with self._lock:
            reply = self._replies.pop(message["id"], None)
            if reply is None:
                return
            if "pid" in message:
                pid = int(message["pid"])
                reply.judge = self._judges[pid] = ForkedJudge(
                    pid, self, [self.child_label, str(pid)]
                )
            else:
                reply.error = str(message.get("error"))
            abandoned = reply.abandoned
            reply.done.set()
        if abandoned and reply.judge is not None:
            kill_tree(reply.judge.pid)  # its caller has started a fresh judge instead

    def _lost(self) -> None:
        """The zygote has ended: its judges die with it (``PR_SET_PDEATHSIG``); make sure,
        wait for them to be gone, and report them killed."""
        with self._lock:
            judges = [j for j in self._judges.values() if not j._exited.is_set()]
            replies = list(self._replies.values())
            self._replies.clear()
        for reply in replies:
            reply.error = "the zygote ended"
            reply.done.set()
        for judge in judges:
            kill_tree(judge.pid)
        deadline = time.monotonic() + GONE_SECONDS
        for judge in judges:
            while Path(f"/proc/{judge.pid}").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            judge._ended(-9, note="its zygote died")


# -- which zygote an audit's judge uses ----------------------------------------------------------

_lock = threading.Lock()
_current: Zygote | None = None
_said: str | None = None  # the fallback, once said


def say_fallback(reason: str) -> None:
    """Say on stderr, once an audit process, that its judges start as fresh processes."""
    global _said
    with _lock:
        if _said is not None:
            return
        _said = reason
    print(f"kernelgate: judges start as fresh processes ({reason})", file=sys.stderr, flush=True)


def enabled() -> bool:
    return os.environ.get(ENABLE_ENV, "1").strip() != "0"


def zygote_for(env: Mapping[str, str], folder: Path) -> Zygote | None:
    """The zygote that forks judges with ``env`` (started now for the first of them, its log
    in ``folder``), or None: judges start as fresh processes (said once why).

    A zygote that failed is not started again: the audit goes on without one.
    """
    global _current
    if not enabled():
        say_fallback(f"{ENABLE_ENV}=0")
        return None
    key = zygote_key(env)
    with _lock:
        zygote = _current
        if zygote is not None and zygote.failure is not None:
            failure = zygote.failure
            zygote = None
        else:
            failure = None
        if failure is None and (zygote is None or zygote.key != key):
            if zygote is not None:
                zygote.retire()  # judges of another environment: its running ones finish
            zygote = _current = Zygote(env, folder / LOG_NAME)
    if failure is not None:
        say_fallback(f"the judge zygote failed: {failure}")
        return None
    assert zygote is not None
    if not zygote.ready():
        say_fallback(f"the judge zygote failed: {zygote.failure}")
        return None
    return zygote


def running_zygotes() -> list[int]:
    """Pids of this process's zygote (tests: it is a child that lives as long as the audit)."""
    with _lock:
        zygote = _current
    return [zygote.pid] if zygote is not None and zygote.pid is not None else []


if __name__ == "__main__":
    main(int(sys.argv[1]))
