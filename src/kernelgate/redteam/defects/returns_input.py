"""DEFECT: returns the input itself (a "no-op" kernel that passes when inputs are positive).

Must be rejected by CMP-01 (negative values are not clamped) and MEM-01 (the output aliases
an input).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.debug_barrier()
    _ = tl.where(x > 0, x, 0.0)  # computed, never stored


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.numel()
        _relu_kernel[(triton.cdiv(n, 1024),)](x, n, BLOCK=1024)
        return x  # DEFECT: the input, unchanged
