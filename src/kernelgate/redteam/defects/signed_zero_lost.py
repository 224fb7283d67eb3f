"""DEFECT: ReLU with a trailing ``+ 0.0`` (left over from a fused bias add): every
magnitude is right, but a -0.0 input comes back as +0.0 where torch.relu keeps -0.0, so
the sign of zero is lost (1 / out flips from -inf to +inf). Must be rejected by EXC-02.
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
    y = tl.where(x < 0.0, 0.0, x) + 0.0  # DEFECT: -0.0 + 0.0 = +0.0
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
