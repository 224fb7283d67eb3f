"""DEFECT: ``relu(a) * b + c`` with a trailing ``+ 0.0`` (a bias add left over from fusion):
every magnitude is right, but each -0.0 result comes back as +0.0. Its relu is CUDA's
(``where(a > 0, a, 0.0)``), whose sign at a = -0.0 the reference leaves open; the -0.0 results
that do not follow from such a zero (+0 * -b + -0, a * -0 + -0) are fixed by IEEE, and this
kernel loses them. Must be rejected by EXC-02 (the honest kernel without the ``+ 0.0`` is the
control ``relu_mul_add_cuda_relu``).
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
    relu_a = tl.where(a > 0.0, a, 0.0)
    relu_a = tl.where(a != a, a, relu_a)
    y = relu_a * b + c + 0.0  # DEFECT: -0.0 + 0.0 = +0.0
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        a, b, c = a.contiguous(), b.contiguous(), c.contiguous()
        out = torch.empty_like(a)
        n = a.numel()
        _relu_mul_add[(triton.cdiv(n, 1024),)](a, b, c, out, n, BLOCK=1024)
        return out
