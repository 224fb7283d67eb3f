"""Defective Triton row sum: iterates over full 1024-wide blocks only, dropping the last
partial block (952 of 3000 columns). ORD-01 must reject it."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rowsum(x_ptr, out_ptr, stride, n_full, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_full, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride + cols)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
        n_full = (x.shape[1] // 1024) * 1024
        _rowsum[(x.shape[0],)](x, out, x.stride(0), n_full, BLOCK=1024)
        return out
