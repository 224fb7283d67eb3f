"""Hostile (template): in forward, SIGKILL the parent and the judge (pid and group).

The judge is waiting for this call's reply: unconfined, it dies mid-gate.
"""

import os

import torch
import torch.nn as nn

from kernelgate.redteam.hostile import kit

ARENA = kit.Arena.rendered("__KERNELGATE_HOSTILE_ARENA__")
kit.mark(ARENA)


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        parent = os.getppid()
        lines = [
            kit.kill(ARENA, parent, "parent"),
            kit.kill(ARENA, ARENA.judge_pid, "judge"),
            kit.kill(ARENA, ARENA.judge_pid, "judge-group", group=True),
        ]
        kit.fail_loudly(lines)
        return torch.zeros_like(a)
