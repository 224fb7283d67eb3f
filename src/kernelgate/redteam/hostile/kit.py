"""What hostile candidates share: their arena, a marker, a report line, safe targets.

This module is imported by candidate code inside the worker, so it uses nothing but the
standard library and holds no secret: everything in it is what any hostile candidate could
write for itself. It exists so that each attack file says only what it attacks.

Three rules keep the suite safe on a shared machine, whatever confinement is (or is not) in
force:

- every path an attack touches comes from its ``Arena`` (rendered into the source by the
  runner): a throwaway directory with copies standing for the reference, kernelgate's source
  and an audit store, never the real ones;
- a signal goes only to a process that is visibly a descendant of the runner (the judge the
  runner started, or something between it and the worker), or to a pid that this process
  cannot see at all (a PID namespace: the number names nothing outside it); never to pid 1,
  the runner, its process group or its session; ``kill(-1)`` only from inside a PID
  namespace other than the runner's;
- every helper process carries the arena's marker (its ``comm`` and ``KGH_ARENA`` in its
  environment), so the runner can find and end whatever outlives a verification, and lives
  at most ``helper_seconds`` (an alarm ends it).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PLACEHOLDER = "__KERNELGATE_HOSTILE_ARENA__"
REPORT_PREFIX = "KGH-REPORT"
MARKER_ENV = "KGH_ARENA"
_PR_SET_NAME = 15


@dataclass(frozen=True)
class Arena:
    """Where one attack may aim: paths and pids the runner rendered into the candidate."""

    token: str  # unique per arena; in every marker and report line
    root: str
    reference: str  # the copy of the reference the judge is judging against
    source_canary: str  # a copy of a kernelgate source file, standing for the real one
    store: str  # a fake audit store folder
    store_rows: str  # its results file
    other_record: str  # another record's evidence in that store
    evidence: str  # the judge's --json path
    notes: str  # where an unconfined candidate may leave its report lines
    home: str  # HOME of the judge (and so of the worker): caches of later judges live here
    fill_paths: list[str] = field(default_factory=list)  # disk-fill targets
    judge_pid: int = 0
    runner_pid: int = 0
    runner_pgid: int = 0
    runner_sid: int = 0
    runner_pidns: str = ""  # readlink /proc/self/ns/pid of the runner
    tcp_port: int = 0
    udp_port: int = 0
    fill_bytes: int = 0
    memory_bytes: int = 0
    fork_count: int = 0
    helper_seconds: int = 20
    device: str = "cpu"

    @property
    def marker(self) -> str:
        """A process name (``comm`` holds 15 bytes) unique to this arena."""
        return f"kgh-{self.token[:11]}"

    @classmethod
    def rendered(cls, text: str) -> Arena:
        """The arena the runner wrote in place of ``PLACEHOLDER``; a clear error in a
        template that was imported as it is."""
        if text == PLACEHOLDER:
            raise RuntimeError(
                "this is a hostile-candidate template: `kernelgate calibrate --hostile` renders "
                "it with a throwaway arena before judging it; do not judge it directly"
            )
        return cls(**json.loads(text))

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True)


# -- marker and reports ---------------------------------------------------------------------
def mark(arena: Arena) -> None:
    """Name this process (and what it starts) after the arena, for the runner's scan."""
    os.environ[MARKER_ENV] = arena.token
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_NAME, arena.marker.encode(), 0, 0, 0)


def report(arena: Arena, event: str, ok: bool, detail: str = "") -> str:
    """One report line: on stderr (the judge keeps the worker's log tail in RES-01's
    evidence) and, where this process may write there, in the arena's notes folder.

    ``ok`` says the attempt succeeded; a failed attempt's detail (an errno) is evidence of
    what stopped it.
    """
    clean = " ".join(str(detail).replace("|", "/").replace('"', "'").replace("\\", "/").split())
    line = f"{REPORT_PREFIX}|{arena.token}|{event}|{int(bool(ok))}|{clean[:300]}|"
    with contextlib.suppress(Exception):
        print(line, file=sys.stderr, flush=True)
    notes = os.path.join(arena.notes, f"{os.getpid()}.log")
    with contextlib.suppress(Exception), open(notes, "a") as sink:
        sink.write(line + "\n")
    return line


def attempt(arena: Arena, event: str, action: Callable[[], Any]) -> str:
    """Run ``action``; report (and return the line) its success, with its return value as
    detail, or the exception that stopped it."""
    try:
        detail = action()
    except BaseException as exc:  # an attack reports every way it was stopped
        return report(arena, event, False, f"{type(exc).__name__}: {exc}")
    return report(arena, event, True, "" if detail is None else str(detail))


def plant(arena: Arena, relative: str, text: str) -> str:
    """Append ``text`` to ``relative`` under the arena's HOME (what a later judge reads),
    making its folders: the attempt of the attacks on later judges' caches."""
    path = os.path.join(arena.home, relative)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a") as planted:
        planted.write(text)
    return f"planted {path}"


def fail_loudly(lines: list[str]) -> None:
    """Raise with the report lines: the exception text reaches the verdict's RES-01
    evidence, the one channel a confined candidate still has to the runner."""
    raise RuntimeError(" ".join(lines) or "hostile candidate")


# -- safe targets ---------------------------------------------------------------------------
def _parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:
        return None
    return int(text.rsplit(")", 1)[1].split()[1])


def visible(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def under_runner(arena: Arena, pid: int) -> bool:
    """Whether ``pid`` is visibly a strict descendant of the runner (not the runner)."""
    seen = 0
    current: int | None = pid
    while current and current > 1 and seen < 64:
        parent = _parent_of(current)
        if parent == arena.runner_pid:
            return True
        current, seen = parent, seen + 1
    return False


def may_signal(arena: Arena, pid: int) -> tuple[bool, str]:
    """Whether this suite lets an attack signal ``pid`` (see the module docstring)."""
    forbidden = {0, 1, arena.runner_pid, arena.runner_pgid, arena.runner_sid}
    if pid == 0:
        return False, "pid 0: no parent visible from here (the worker heads a PID namespace)"
    if pid < 0 or pid in forbidden:
        return False, f"pid {pid} is never a target (init, the runner or its group)"
    if not visible(pid):
        return True, f"pid {pid} is not visible here"
    if under_runner(arena, pid):
        return True, f"pid {pid} is a descendant of the runner"
    return False, f"pid {pid} is visible and not the runner's descendant: left alone"


def kill(arena: Arena, pid: int, what: str, group: bool = False) -> str:
    """SIGKILL ``pid`` (or its process group) when ``may_signal`` allows; report either way."""
    event = f"kill-{what}"
    allowed, why = may_signal(arena, pid)
    if not allowed:
        return report(arena, event, False, f"not attempted: {why}")
    try:
        if group:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except OSError as exc:
        return report(arena, event, False, f"{type(exc).__name__}: {exc}")
    return report(arena, event, True, f"SIGKILL sent to {'group ' if group else ''}{pid}")


def own_pid_namespace(arena: Arena) -> bool:
    """Whether this process lives in a PID namespace other than the runner's (False when
    either is unknown: ``kill(-1)`` must never run on a guess)."""
    if not arena.runner_pidns.startswith("pid:["):
        return False
    try:
        return os.readlink("/proc/self/ns/pid") != arena.runner_pidns
    except OSError:
        return False


# -- helpers that try to outlive the worker -------------------------------------------------
def detach(arena: Arena, body: Callable[[], None], *, close_fds: bool = True) -> None:
    """Run ``body`` in a grandchild in its own session (double fork + setsid), marked and
    bounded by an alarm; the worker goes on at once."""
    first = os.fork()
    if first:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(first, 0)
        return
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        mark(arena)
        signal.alarm(max(1, arena.helper_seconds))  # the default action ends the helper
        if close_fds:  # the protocol pipes stay with the worker
            os.closerange(3, 1024)
        body()
    except BaseException as exc:
        with contextlib.suppress(BaseException):
            report(arena, "helper", False, f"{type(exc).__name__}: {exc}")
    os._exit(0)
