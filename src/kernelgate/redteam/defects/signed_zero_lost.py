"""DEFECT: ReLU written as ``where(x <= 0, 0, x)``: every magnitude is right and NaN still
propagates, but a -0.0 input selects the +0.0 branch where torch.relu keeps -0.0, so the
sign of zero is lost (1 / out flips from -inf to +inf). Must be rejected by EXC-02.

(An earlier version lost the sign through a trailing ``+ 0.0``; ptxas folds an ``add.f32``
of zero on the device, so that defect only showed under the interpreter. A select cannot
be folded that way.)
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
    y = tl.where(x <= 0.0, 0.0, x)  # DEFECT: -0.0 <= 0.0 selects +0.0
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
