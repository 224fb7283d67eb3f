"""A trusted candidate that exercises what a confined worker must still be able to do.

When a candidate fails to load under confinement, the judge loads this probe under the same
confinement (``WorkerSession.start``). Only if the probe fails too is confinement to blame,
and only then does the judge loosen it, for this machine and with the reason reported. A
hostile candidate therefore cannot talk its way out of confinement by failing on purpose.

On a CUDA device it creates a context, runs an eager kernel and, where Triton works,
compiles and launches a Triton kernel (the driver's caches and Triton's go to the scratch
folder); on the CPU the Triton kernel runs under the interpreter.
"""

from __future__ import annotations

import torch


def _triton_add_one(x: torch.Tensor) -> torch.Tensor:
    import triton
    import triton.language as tl

    @triton.jit
    def add_one(x_ptr, out_ptr, n, block: tl.constexpr):
        offsets = tl.program_id(0) * block + tl.arange(0, block)
        mask = offsets < n
        tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) + 1, mask=mask)

    out = torch.empty_like(x)
    add_one[(1,)](x, out, x.numel(), block=16)
    return out


class ModelNew(torch.nn.Module):
    """Raises at construction if the device, its caches or Triton do not work here."""

    def __init__(self) -> None:
        super().__init__()
        device = "cuda" if torch.cuda.is_available() else "cpu"
        x = torch.arange(8, dtype=torch.float32, device=device)
        if float((x + 1).sum()) != 36.0:
            raise RuntimeError("eager add gave a wrong sum")
        if float(_triton_add_one(x).sum()) != 36.0:
            raise RuntimeError("Triton add gave a wrong sum")
        if device == "cuda":
            torch.cuda.synchronize()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + 1
