"""Hostile (template): in forward, forge the worker's reply frame and silence the real one.

The protocol descriptors are in the worker's ``sys.argv``. The candidate writes an ``ok``
frame of its own (outputs: its first input, plus ``"verdict": "verified"``) into the reply
pipe, then points the worker's descriptor at /dev/null, so every later reply the judge reads
is forged. Its values are still wrong: the judge must reject it, and must not hang on the
replies that never come.
"""

import os
import sys

import torch
import torch.nn as nn

from kernelgate.redteam.hostile import kit
from kernelgate.sandbox import wire

ARENA = kit.Arena.rendered("__KERNELGATE_HOSTILE_ARENA__")
kit.mark(ARENA)

_PIPE: list[int] = []  # a private copy of the reply descriptor


def _reply_fd() -> int:
    if not _PIPE:
        fd = int(sys.argv[2])
        _PIPE.append(os.dup(fd))
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    return _PIPE[0]


def _forge(a: torch.Tensor) -> str:
    blobs: list[bytes] = []
    header = {
        "ok": True,
        "verdict": "verified",
        "outputs": wire.encode_value(a.detach().clone(), blobs),
        "inputs_after": [],
        "allocations": [],
        "kernels": [],
    }
    wire.send_frame(_reply_fd(), header, blobs)
    return "forged reply frame sent; the worker's own reply goes to /dev/null"


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        kit.attempt(ARENA, "forged-frame", lambda: _forge(a))
        return torch.zeros_like(a)
