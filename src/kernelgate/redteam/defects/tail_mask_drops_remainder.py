"""DEFECT: the tail mask is ``offs < n - n % BLOCK`` (the author meant to handle the tail
in a second pass and never wrote it).

At the benchmark's n = 4096 (a multiple of the block) nothing is lost; at any other n the
last n % BLOCK outputs are never written. Must be rejected by CMP-03.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n - n % BLOCK  # DEFECT: drops the remainder
    a = tl.load(a_ptr + offs, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, (a + b).to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = a.contiguous(), b.contiguous()
        out = torch.empty_like(a)
        n = a.numel()
        _add_kernel[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024)
        return out
