"""Nothing of a verification outlives it: the processes it started are killed and reaped
before its evidence is written (issue 18; docs/design.md, "Evidence integrity").

Kept apart from ``processes.py``, which a test loads on its own, without the package.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kernelgate.audit.processes import (
    become_subreaper,
    children_map,
    is_subreaper,
    kill_tree,
    running,
)

REAP_SECONDS = 10.0  # how long killed leftovers may take to die before the judge gives up


@dataclass
class SettledTree:
    """What ``worker_tree_settled`` found when the verification's processes should be gone.

    ``adopting``: orphans were handed to this process while it ran (a subreaper), so a
    double-forked helper was within reach; without it (not Linux, or prctl refused) such a
    helper escapes to init and only the OS confinement of the worker can stop it.
    ``killed``: the processes still running at the end (pid and command line), all killed.
    ``surviving``: those still there after ``REAP_SECONDS`` (nothing may be written then).
    """

    adopting: bool = False
    killed: list[str] = field(default_factory=list)
    surviving: list[int] = field(default_factory=list)


def _describe(pid: int) -> str | None:
    """``pid`` and its command line, or None for a zombie or a process already gone."""
    if not running(pid):
        return None
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    command = " ".join(a.decode(errors="replace") for a in argv if a)[:120]
    return f"{pid} ({command or '?'})"


def _new_children(before: set[int]) -> list[int]:
    return [c for c in children_map().get(os.getpid(), []) if c not in before]


@contextlib.contextmanager
def worker_tree_settled() -> Iterator[SettledTree]:
    """Run a verification, then make sure every process it started is gone (issue 18).

    For a process that runs one verification and then writes its evidence (``kernelgate
    verify``, an audit's judge): on entry it becomes a subreaper, so anything a candidate
    double-forks is adopted here rather than by init; on exit, every child that was not
    there on entry (a worker that was not closed, an adopted helper) is killed with its
    whole tree and reaped, and the subreaper role is given back if it was not held before.
    Evidence written after the block cannot be rewritten by a process of the candidate's
    that outlived its worker: there is none left. Not for a process that runs several
    verifications at once in threads (``calibrate``): it would kill the others' workers.
    """
    held_before = is_subreaper()
    settled = SettledTree(adopting=held_before or become_subreaper())
    me = os.getpid()
    before = set(children_map().get(me, [])) if Path("/proc").is_dir() else set()
    try:
        yield settled
    finally:
        if Path("/proc").is_dir():
            _kill_and_reap_new_children(before, settled)
        if settled.adopting and not held_before:
            become_subreaper(False)


def _kill_and_reap_new_children(before: set[int], settled: SettledTree) -> None:
    """Kill every child of this process not in ``before`` (with its tree) and reap it,
    until none is left or ``REAP_SECONDS`` pass; fill ``settled``."""
    deadline = time.monotonic() + REAP_SECONDS
    seen: set[int] = set()
    # The worker fork server (sandbox/forkserver.py) is the judge's, holds nothing of the
    # verification, and stays for the next one; the workers it forked are killed as ours.
    from kernelgate.sandbox import forkserver

    settled.killed += forkserver.end_open_workers(_describe, REAP_SECONDS)
    before = before | set(forkserver.running_servers())
    while True:
        fresh = _new_children(before)
        for child in fresh:
            if child not in seen:
                seen.add(child)
                described = _describe(child)
                if described is not None:
                    settled.killed.append(described)
            kill_tree(child)
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(child, os.WNOHANG)
        if not fresh:
            settled.surviving = []
            return
        if time.monotonic() > deadline:
            settled.surviving = fresh
            return
        time.sleep(0.02)
