"""DEFECT: one warp holds a 16384-wide tile live across a reduction: 512 floats per thread,
far past 255 registers, so the compiled kernel spills to local memory. The values are
right. Must be rejected by RES-02 (device only: spills are a property of the compiled GPU
kernel).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_wide(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    top = tl.max(tl.where(mask, x, -float("inf")), axis=0)  # keeps the whole tile live
    y = tl.where(x > top, 0.0, tl.where(x < 0.0, 0.0, x))
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        for start in range(0, n, 16384):
            chunk = min(16384, n - start)
            _relu_wide[(1,)](x[start:], out[start:], chunk, BLOCK=16384, num_warps=1)
        return out
