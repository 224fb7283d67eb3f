"""Hostile (template): in forward, close both protocol descriptors, then return zeros.

The worker cannot answer; the judge must see a vanished worker (an incident), not hang or
crash, and reject.
"""

import os
import sys

import torch
import torch.nn as nn

from kernelgate.redteam.hostile import kit

ARENA = kit.Arena.rendered("__KERNELGATE_HOSTILE_ARENA__")
kit.mark(ARENA)


def _close() -> str:
    fds = [int(sys.argv[1]), int(sys.argv[2])]
    for fd in fds:
        os.close(fd)
    return f"closed protocol descriptors {fds}"


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        kit.attempt(ARENA, "close-pipes", _close)
        return torch.zeros_like(a)
