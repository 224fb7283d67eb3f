"""DEFECT: ReLU computed in place into the input, and the input returned as the output.

The values are right, but the caller's tensor is overwritten and the output aliases it.
Must be rejected by MEM-01.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_inplace(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(x_ptr + offs, tl.where(x < 0.0, 0.0, x), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_contiguous():
            x = x.contiguous()
        n = x.numel()
        _relu_inplace[(triton.cdiv(n, 1024),)](x, n, BLOCK=1024)
        return x  # DEFECT: output is the (overwritten) input
