"""Device results brought to the host into page-locked (pinned) memory.

A judge on a GPU host brings every drawn case to the host, and sends it back (to the
worker and the oracle); the oracle's results stay on the device (``fp64.results_device``)
unless ``KERNELGATE_RESULTS_ON_DEVICE=0``, the judge's device budget for them or the device
running out of memory sends them here (``GateContext._kept``, ``GateContext.spill``).
From ordinary (pageable) memory each copy costs the judge's one core a pass over every
byte: the driver stages it through a pinned buffer and the CPU copies it on, into pages the
kernel must first zero. Profiled on the
H200 (2026-12-04, ``benchmarks/results/judge-profile-h200-2026-12-04.json``) such copies were
about half of an audit's judge CPU. Into pinned memory the GPU's copy engine writes
directly, and a later upload reads from it directly: the judge waits (asleep, with the
blocking wait ``audit/device_waits.py`` sets) instead of copying.

Pinned memory cannot be paged out and torch's host allocator keeps freed blocks for reuse
(rounded up to a power of two), so only tensors up to ``PINNED_MAX_BYTES`` are pinned; a
larger one, a failure to pin, a CPU tensor or ``KERNELGATE_PINNED=0`` gives ``Tensor.cpu``'s
own result. The values are the same bits either way.
"""

from __future__ import annotations

import os

import torch

ENV = "KERNELGATE_PINNED"  # "0": plain .cpu()
PINNED_MAX_BYTES = 1 << 30


def to_host(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` on the CPU (itself when it is there), pinned where that is worth it."""
    if tensor.device.type != "cuda" or not _wanted(tensor):
        return tensor.cpu()
    try:
        host = torch.empty_like(tensor, device="cpu", pin_memory=True)
    except RuntimeError:  # pinned memory refused: the plain copy is correct, only slower
        return tensor.cpu()
    host.copy_(tensor)  # synchronous: the values are there when this returns
    return host


def _wanted(tensor: torch.Tensor) -> bool:
    if os.environ.get(ENV, "1").strip() == "0":
        return False
    return 0 < tensor.untyped_storage().nbytes() <= PINNED_MAX_BYTES
