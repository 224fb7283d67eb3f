"""Hostile (template): in forward, kill(-1, SIGKILL): every process it may signal.

Only run where it cannot hurt the machine: inside a PID namespace other than the runner's,
where -1 means the worker's own tree. Anywhere else it records that it would have and does
nothing (the runner reports the attack as not held off: not confined).
"""

import os
import signal

import torch
import torch.nn as nn

from kernelgate.redteam.hostile import kit

ARENA = kit.Arena.rendered("__KERNELGATE_HOSTILE_ARENA__")
kit.mark(ARENA)


def _kill_all() -> str:
    os.kill(-1, signal.SIGKILL)
    return f"kill(-1) sent from pid {os.getpid()} inside its own PID namespace"


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if kit.own_pid_namespace(ARENA):
            kit.attempt(ARENA, "kill-all", _kill_all)
            lines = [kit.report(ARENA, "kill-all-survived", True, "the worker is still here")]
        else:
            lines = [
                kit.report(
                    ARENA,
                    "skipped-unconfined",
                    False,
                    "kill(-1) not sent: the worker shares the runner's PID namespace, so it "
                    "would reach every process of this user on the machine",
                )
            ]
        kit.fail_loudly(lines)
        return torch.zeros_like(a)
