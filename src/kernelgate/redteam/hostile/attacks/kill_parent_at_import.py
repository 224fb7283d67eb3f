"""Hostile (template): at import, SIGKILL the parent, its process group and the judge.

Unconfined, the judge dies before it can print a verdict. The kills go only where
``kit.may_signal`` allows (the runner's descendants, or pids this process cannot see).
"""

import os

import torch
import torch.nn as nn

from kernelgate.redteam.hostile import kit

ARENA = kit.Arena.rendered("__KERNELGATE_HOSTILE_ARENA__")
kit.mark(ARENA)

PARENT = os.getppid()
try:
    PARENT_GROUP = os.getpgid(PARENT) if PARENT > 0 else 0
except OSError:
    PARENT_GROUP = 0
LINES = [
    kit.kill(ARENA, PARENT_GROUP, "parent-group", group=True),
    kit.kill(ARENA, PARENT, "parent"),
    kit.kill(ARENA, ARENA.judge_pid, "judge"),
]


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        kit.fail_loudly(LINES)  # still alive: say what stopped the kills
        return torch.zeros_like(a)
