"""Process plumbing shared by the audit's judge and old-check children.

An audit runs thousands of hostile programs. Two things keep one record's misbehaviour from
outliving it: every child dies with its parent (``PR_SET_PDEATHSIG``), and a
record that runs past its limit has its whole process tree killed, including workers that
put themselves in sessions of their own.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from pathlib import Path
from typing import Protocol

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
PARENT_ENV = "KERNELGATE_AUDIT_PARENT"  # the pid a child must die with


class JudgeProcess(Protocol):
    """What the audit uses of a judge process: ``subprocess.Popen``'s surface, which a judge
    forked by the zygote (``zygote.ForkedJudge``) has too. ``returncode`` is minus the
    signal number for a judge a signal ended."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


def die_with_parent(expected_parent: int | None = None) -> None:
    """Ask Linux to SIGKILL this process when its parent goes away (call it in the child).

    Without it, an audit killed with SIGKILL would leave its judges running, burning the
    cores a resumed audit needs. It is called by the child itself rather than through
    ``preexec_fn``, which is unsafe in the audit's threaded parent. If the parent already
    died before the call, the child exits at once.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if expected_parent is not None and os.getppid() != expected_parent:
        os._exit(1)


def become_subreaper(enable: bool = True) -> bool:
    """Adopt this process's orphaned descendants (call it in the judge); whether it worked.

    A candidate that forks twice and lets the middle process exit (a daemon's classic
    escape) leaves a grandchild that Linux hands to init, out of every process tree that
    ``kill_tree`` walks: it would outlive its record and the audit. Under a subreaper
    judge it is handed to the judge instead, where ``kill_tree`` of the judge finds it.
    ``enable=False`` gives the role back (``worker_tree_settled`` restores what it found).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, int(enable), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def is_subreaper() -> bool:
    """Whether this process adopts its orphaned descendants (False where it cannot tell)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        state = ctypes.c_int(0)
        if libc.prctl(PR_GET_CHILD_SUBREAPER, ctypes.byref(state), 0, 0, 0) != 0:
            return False
        return bool(state.value)
    except (OSError, AttributeError):
        return False


def children_map() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command name is in parentheses and may hold spaces: split after the last ")"
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) > 1:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def descendants(pid: int, children: dict[int, list[int]]) -> list[int]:
    """Every descendant of ``pid`` in ``children`` (a ``children_map``), parents first."""
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(0), []):
            found.append(child)
            queue.append(child)
    return found


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every descendant (found through /proc, sessions notwithstanding).

    The tree is frozen first (SIGSTOP, looking again until no new process turns up): a
    process that forks between the look at the tree and its own death would otherwise leave
    a child that no look saw, reparented away from the tree and out of reach (a judge
    starting its candidate's worker, in a session of its own, at the moment of a stop).
    """
    if not Path("/proc").is_dir():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
        return
    frozen: list[int] = []
    tree = [pid]
    while True:
        new = [victim for victim in tree if victim not in frozen]
        if not new:
            break
        for victim in new:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(victim, signal.SIGSTOP)
        frozen += new
        tree = [pid, *descendants(pid, children_map())]
    for victim in frozen:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(victim, signal.SIGKILL)


GONE_SECONDS = 5.0  # how long killed processes may take to be gone before one stops waiting


def kill_descendants(seconds: float = GONE_SECONDS) -> list[int]:
    """SIGKILL every descendant of this process and wait until each is gone (a judge's last
    act: with ``become_subreaper`` that includes whatever a candidate left running behind
    its worker); returns the pids still running after ``seconds`` (normally none).

    Why wait: SIGKILL is delivered at once but a process takes a while to die (a worker
    fork server with torch mapped tears down gigabytes of address space), and a judge that
    exits in the meantime leaves it running after its caller saw the judge return. The
    hostile suite caught one so under load ("outlived: ... (python)").
    """
    if not Path("/proc").is_dir():
        return []
    children = children_map()
    victims = set(descendants(os.getpid(), children))
    for child in children.get(os.getpid(), []):
        kill_tree(child)
    victims |= set(descendants(os.getpid(), children_map()))  # reparented here meanwhile
    return wait_gone(victims, seconds)


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie or a dying process is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2 :].split()
    return bool(fields) and fields[0] not in ("Z", "X")


def wait_gone(pids: set[int] | list[int], seconds: float = GONE_SECONDS) -> list[int]:
    """Wait until none of ``pids`` runs, reaping those that are this process's children;
    returns the ones still running after ``seconds``."""
    deadline = time.monotonic() + seconds
    left = set(pids)
    while left:
        for pid in list(left):
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)  # ours: reaped, so it leaves /proc
            if not running(pid):
                left.discard(pid)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    return sorted(left)


def child_env(device: str) -> dict[str, str]:
    """Environment of an audit child: kernelgate importable, the parent pid to die with, and
    in CPU mode Triton's interpreter with no CUDA device visible (as ``verify``'s worker)."""
    import kernelgate
    from kernelgate import bytecode

    env = bytecode.child_env(dict(os.environ))
    src = str(Path(kernelgate.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env[PARENT_ENV] = str(os.getpid())
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def die_with_audit_parent() -> None:
    """``die_with_parent`` for a child started with ``child_env``."""
    parent = os.environ.get(PARENT_ENV)
    die_with_parent(int(parent) if parent and parent.isdigit() else None)


def exit_when_reader_gone(fd: int, poll_seconds: float = 0.5) -> None:
    """End this process (exit 1) as soon as nobody holds the read end of the pipe whose
    write end is ``fd``: the parent-death check of a child that reports on a pipe.

    Why not ``die_with_audit_parent``: a child started under the confinement launcher is
    not the judge's child (its parent is the launcher, or the init of its PID namespace,
    where ``getppid()`` names nobody outside), so its parent's death says nothing about the
    judge's. The pipe does: its read end lives in the judge alone, and Linux reports
    ``POLLERR`` on the write end once no reader is left. A watcher thread looks every
    ``poll_seconds``; ``PR_SET_PDEATHSIG`` is set too (whoever the parent is). A judge that
    is already gone ends this process at once.
    """
    import select
    import threading

    die_with_parent()
    gone = select.POLLERR | select.POLLHUP | select.POLLNVAL

    def reader_gone() -> bool:
        poller = select.poll()
        poller.register(fd, gone)
        return any(event & gone for _, event in poller.poll(0))

    if reader_gone():
        os._exit(1)

    def watch() -> None:
        while True:
            time.sleep(poll_seconds)
            if reader_gone():
                os._exit(1)

    threading.Thread(target=watch, name="kernelgate-reader-watch", daemon=True).start()


def tail(path: Path, limit: int = 1500) -> str:
    """The last ``limit`` characters of a log file, for a one-line reason."""
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""
