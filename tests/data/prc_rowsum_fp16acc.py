"""Defective Triton row sum: fp32 in and out, but the running sums are kept in fp16.

64 lanes each accumulate ~47 terms in an fp16 register; PRC-02 must reject it.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rowsum(x_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float16)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=0.0)
        acc += x.to(tl.float16)
    tl.store(out_ptr + row, tl.sum(acc.to(tl.float32), axis=0))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
        _rowsum[(x.shape[0],)](x, out, x.stride(0), x.shape[1], BLOCK=64)
        return out
