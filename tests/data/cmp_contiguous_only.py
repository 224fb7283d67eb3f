"""Defect (CMP-02): indexes x as if it were contiguous (ignores strides).

Right on contiguous inputs at any offset, wrong on strided, transposed and expanded views.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _silu(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x / (1.0 + tl.exp(-x)), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        n = x.numel()
        _silu[(triton.cdiv(n, 256),)](x, out, n, BLOCK=256)
        return out
