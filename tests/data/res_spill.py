"""DEFECT (RES-02): a launch capped at 32 registers per thread that needs far more.

One warp holds a 2048-element tile live across a reduction (64 floats per thread) while
``maxnreg=32`` caps the registers, so the compiled kernel spills to local memory. Values
are exact (y = x * 0.5; the comparison with the tile's maximum never selects 0).
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _spilling_half_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    top = tl.max(tl.where(mask, x, -float("inf")), axis=0)
    y = tl.where(x > top, 0.0, x * 0.5)
    tl.store(out_ptr + offs, y, mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        _spilling_half_kernel[(1,)](x, out, x.numel(), BLOCK=2048, num_warps=1, maxnreg=32)
        return out
