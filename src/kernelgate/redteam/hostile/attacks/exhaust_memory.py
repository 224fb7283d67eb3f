"""Hostile (template): in forward, allocate and touch up to ``ARENA.memory_bytes``.

Bounded (the runner renders 0, and skips the attack, on a machine with less than 8 GiB
available); the memory is let go before forward raises, so an unconfined run leaves the
machine as it found it. What matters: the judge survives and no verdict flips.
"""

import torch
import torch.nn as nn

from kernelgate.redteam.hostile import kit

ARENA = kit.Arena.rendered("__KERNELGATE_HOSTILE_ARENA__")
kit.mark(ARENA)

CHUNK = 64 * 1024 * 1024


def _exhaust() -> str:
    held: list[bytearray] = []
    try:
        while len(held) * CHUNK < ARENA.memory_bytes:
            held.append(bytearray(b"\x5a") * CHUNK)  # written, so really resident
    except MemoryError:
        raise MemoryError(f"refused after {len(held) * CHUNK >> 20} MiB") from None
    finally:
        got = len(held) * CHUNK
        held.clear()
    return f"allocated and touched {got >> 20} MiB (the bound)"


_DONE: list[str] = []


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if not _DONE:
            _DONE.append(kit.attempt(ARENA, "memory-exhaust", _exhaust))
        kit.fail_loudly(_DONE)
        return torch.zeros_like(a)
