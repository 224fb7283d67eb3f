"""Hostile (template): in forward, write up to ``ARENA.fill_bytes`` to fill the disk.

Half into a file in the judge's folder and half into one in the system temporary folder
(both named by the runner, which removes them); a third, small file in the worker's current
directory shows where the worker may write. Writing stops at the first refusal.
"""

import os

import torch
import torch.nn as nn

from kernelgate.redteam.hostile import kit

ARENA = kit.Arena.rendered("__KERNELGATE_HOSTILE_ARENA__")
kit.mark(ARENA)

CHUNK = 16 * 1024 * 1024


def _fill(path: str, limit: int) -> str:
    block = b"\xa5" * CHUNK
    written = 0
    try:
        with open(path, "wb") as sink:
            while written < limit:
                written += sink.write(block[: min(CHUNK, limit - written)])
                sink.flush()
    except OSError as exc:
        raise OSError(exc.errno, f"{exc.strerror} after {written >> 20} MiB in {path}") from None
    return f"wrote {written >> 20} MiB to {path}"


_DONE: list[str] = []


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if not _DONE:
            share = ARENA.fill_bytes // max(1, len(ARENA.fill_paths))
            for path in ARENA.fill_paths:
                _DONE.append(kit.attempt(ARENA, "disk-fill", lambda p=path: _fill(p, share)))
            here = os.path.join(os.getcwd(), f"kgh-{ARENA.token}-cwd.bin")
            _DONE.append(kit.attempt(ARENA, "cwd-write", lambda: _fill(here, CHUNK)))
        kit.fail_loudly(_DONE)
        return torch.zeros_like(a)
