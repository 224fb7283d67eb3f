"""Defect (CMP-02): assumes a 16-byte-aligned start, as a vectorised load would.

It rounds the storage offset down to a multiple of 4 floats before loading (what a float4
load from a misaligned address does), so it is right only at 16-byte-aligned offsets.
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
        x = x.contiguous()
        aligned = x.storage_offset() - x.storage_offset() % 4
        x = x.as_strided(x.shape, x.stride(), aligned)
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        n = x.numel()
        _silu[(triton.cdiv(n, 256),)](x, out, n, BLOCK=256)
        return out
