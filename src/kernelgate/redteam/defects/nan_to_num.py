"""DEFECT: "numerically safe" GELU that sanitises its input with nan_to_num.

NaN becomes 0 and +-Inf become +-FLT_MAX before the kernel runs, so non-finite inputs
never reach the output. Must be rejected by EXC-01.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gelu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.nan_to_num(x.contiguous())  # DEFECT: swallows NaN and Inf
        out = torch.empty_like(x)
        n = x.numel()
        _gelu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
