"""DEFECT: the residual scale ``x * scale`` with a trailing ``+ 0.0`` (left over from a fused
bias add): every magnitude is right, but -0.0 (and every negative product that underflows
to -0.0) comes back as +0.0, so the sign of zero is lost (1 / out flips from -inf to +inf).
Must be rejected by EXC-02.

The sign of a product is fixed by IEEE on every device. (An earlier version lost the sign
of relu(-0.0), which PyTorch itself does not pin down: CUDA's relu returns +0.0, the CPU's
-0.0, so EXC-02 rightly leaves those positions unjudged.)
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = x * scale + 0.0  # DEFECT: -0.0 + 0.0 = +0.0
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _scale_kernel[(triton.cdiv(n, 1024),)](x, out, n, self.scale, BLOCK=1024)
        return out
