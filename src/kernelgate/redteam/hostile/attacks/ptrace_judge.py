"""Hostile (template): in forward, attach to the judge with ptrace (through ctypes).

PTRACE_SEIZE does not stop the judge; PTRACE_INTERRUPT stops it in a ptrace-stop (never a
group-stop), a word is peeked, and PTRACE_DETACH lets it go: the judge is held for
milliseconds. A successful attach is reported as ``ptrace-judge`` with ok=1.
"""

import ctypes
import os
import signal
import time

import torch
import torch.nn as nn

from kernelgate.redteam.hostile import kit

ARENA = kit.Arena.rendered("__KERNELGATE_HOSTILE_ARENA__")
kit.mark(ARENA)

PTRACE_PEEKDATA, PTRACE_DETACH = 2, 17
PTRACE_SEIZE, PTRACE_INTERRUPT = 0x4206, 0x4207
WALL = 0x40000000

_libc = ctypes.CDLL(None, use_errno=True)
_libc.ptrace.restype = ctypes.c_long
_libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]


def _call(request: int, pid: int, address: int = 0) -> int:
    ctypes.set_errno(0)
    value = _libc.ptrace(request, pid, ctypes.c_void_p(address), None)
    errno = ctypes.get_errno()
    if value == -1 and errno:
        raise OSError(errno, f"ptrace({request:#x}, {pid}): {os.strerror(errno)}")
    return value


def _first_address(pid: int) -> int:
    with open(f"/proc/{pid}/maps") as maps:
        for line in maps:
            fields = line.split()
            if fields[1].startswith("r"):
                return int(fields[0].split("-")[0], 16)
    raise PermissionError(f"no readable mapping listed for pid {pid}")


def _attach(pid: int) -> str:
    allowed, why = kit.may_signal(ARENA, pid)
    if not allowed:
        raise PermissionError(f"not attempted: {why}")
    _call(PTRACE_SEIZE, pid)
    try:
        _call(PTRACE_INTERRUPT, pid)
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            waited, _ = os.waitpid(pid, os.WNOHANG | WALL)
            if waited == pid:
                break
            time.sleep(0.005)
        address = _first_address(pid)
        word = _call(PTRACE_PEEKDATA, pid, address)
        return f"attached to pid {pid}, peeked {word & 0xFFFFFFFFFFFFFFFF:#x} at {address:#x}"
    finally:
        try:
            _call(PTRACE_DETACH, pid)
        finally:
            os.kill(pid, signal.SIGCONT)  # harmless if it runs; a stop must not outlive us


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        targets = dict.fromkeys([os.getppid(), ARENA.judge_pid])
        lines = [
            kit.attempt(ARENA, "ptrace-judge", lambda pid=pid: _attach(pid)) for pid in targets
        ]
        kit.fail_loudly(lines)
        return torch.zeros_like(a)
