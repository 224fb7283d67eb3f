"""Flushes subnormal results to a zero of the same sign: allowed only under flush-allowed."""

import torch
import triton
import triton.language as tl


@triton.jit
def _half_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(x_ptr + offs, mask=mask) * 0.5
    tl.store(out_ptr + offs, tl.where(tl.abs(y) < 1.1754944e-38, y * 0.0, y), mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _half_kernel[(triton.cdiv(n, 256),)](x, out, n, BLOCK=256)
        return out
