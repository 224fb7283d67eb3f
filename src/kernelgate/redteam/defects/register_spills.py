"""DEFECT: a launch "tuned for occupancy" with ``maxnreg=32`` while one warp holds a
2048-wide tile live across a reduction (64 floats per thread plus temporaries): the
compiled kernel runs out of registers and spills to local memory. The values are right.
Must be rejected by RES-02 (in CPU mode through the offline sm_90 compile; on the device
from the launched kernel).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

TILE = 2048


@triton.jit
def _relu_wide(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
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
        _relu_wide[(triton.cdiv(n, TILE),)](x, out, n, BLOCK=TILE, num_warps=1, maxnreg=32)
        return out
