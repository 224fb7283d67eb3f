"""Honest Triton exp(x - 95): on a GPU, tl.exp may flush its subnormal results (ftz)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _exp_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.exp(x - 95.0), mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _exp_kernel[(triton.cdiv(n, 256),)](x, out, n, BLOCK=256)
        return out
