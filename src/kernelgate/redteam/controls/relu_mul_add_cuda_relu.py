"""Control: ``relu(a) * b + c`` in one Triton kernel whose relu follows CUDA's convention,
``where(a > 0, a, 0.0)``: relu(-0.0) is +0.0 (PyTorch's CPU relu gives -0.0). Which zero a
selection between +0 and -0 returns is left open by IEEE 754 and by PyTorch, so every sign
that follows from it (here ``relu(-0.0) * b + -0.0``) is open too: EXC-02 must accept it.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_mul_add(a_ptr, b_ptr, c_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask).to(tl.float32)
    c = tl.load(c_ptr + offs, mask=mask).to(tl.float32)
    relu_a = tl.where(a > 0.0, a, 0.0)  # CUDA's relu: -0.0 -> +0.0; NaN -> 0.0 (see below)
    relu_a = tl.where(a != a, a, relu_a)  # NaN propagates, as torch.relu's does
    tl.store(out_ptr + offs, (relu_a * b + c).to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        a, b, c = a.contiguous(), b.contiguous(), c.contiguous()
        out = torch.empty_like(a)
        n = a.numel()
        _relu_mul_add[(triton.cdiv(n, 1024),)](a, b, c, out, n, BLOCK=1024)
        return out
