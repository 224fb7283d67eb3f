"""DEFECT: ReLU that clamps its result to the finite fp32 range "to avoid overflow".

+Inf comes out as FLT_MAX. Must be rejected by EXC-01.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.where(x < 0.0, 0.0, x)
    y = tl.minimum(y, 3.4028234663852886e38)  # DEFECT: +Inf turned finite
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
