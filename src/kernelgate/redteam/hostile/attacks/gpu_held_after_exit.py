"""Hostile (template): leave a process holding the GPU after the worker exits.

In forward it starts a fresh Python helper in its own session (CUDA cannot be used in a
forked child of a process that already initialised it) that allocates 256 MiB of device
memory and keeps it for ``ARENA.helper_seconds``: a later judge on the same device starts
with less memory. On the CPU the helper holds 64 MiB of host memory instead (the analogue:
a process outliving the verification). The environment carries the arena's marker.
"""

import os
import subprocess
import sys

import torch
import torch.nn as nn

from kernelgate.redteam.hostile import kit

ARENA = kit.Arena.rendered("__KERNELGATE_HOSTILE_ARENA__")
kit.mark(ARENA)

GPU_HELPER = (
    "import time, torch; x = torch.empty(256 << 20, dtype=torch.uint8, device='cuda'); "
    "torch.cuda.synchronize(); time.sleep({seconds})"
)
CPU_HELPER = "import time; x = bytearray(b'1') * (64 << 20); time.sleep({seconds})"


def _start_helper(on_device: bool) -> str:
    code = (GPU_HELPER if on_device else CPU_HELPER).format(seconds=ARENA.helper_seconds)
    env = dict(os.environ, **{kit.MARKER_ENV: ARENA.token})
    helper = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env,
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        close_fds=True,
    )
    where = "256 MiB of device memory" if on_device else "64 MiB of host memory (CPU analogue)"
    return f"helper pid {helper.pid} holds {where}"


_DONE: list[str] = []


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if not _DONE:
            on_device = a.is_cuda
            _DONE.append(kit.attempt(ARENA, "gpu-helper", lambda: _start_helper(on_device)))
        return torch.zeros_like(a)
