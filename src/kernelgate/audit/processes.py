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
from pathlib import Path

PR_SET_PDEATHSIG = 1
PARENT_ENV = "KERNELGATE_AUDIT_PARENT"  # the pid a child must die with


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


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every descendant (found through /proc, sessions notwithstanding)."""
    victims = [pid]
    if Path("/proc").is_dir():
        children = children_map()
        queue = [pid]
        while queue:
            for child in children.get(queue.pop(), []):
                victims.append(child)
                queue.append(child)
    for victim in victims:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(victim, signal.SIGKILL)


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


def tail(path: Path, limit: int = 1500) -> str:
    """The last ``limit`` characters of a log file, for a one-line reason."""
    try:
        return path.read_text(errors="replace")[-limit:]
    except OSError:
        return ""
