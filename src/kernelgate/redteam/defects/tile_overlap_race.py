"""DEFECT: ReLU whose store mask is off by one (``offs <= end``): each program also writes
the first element of the next program's block, with the 0 its masked load gave it.

The Triton interpreter runs programs in order, so the next program always overwrites that
element with the right value; on a GPU the programs race and the element is 0 whenever the
earlier block's store lands last. Must be rejected by RES-01 (the interpreter's access
trace: the same address stored by two program instances without an atomic); on a device
CMP-01 or ORD-02 where the race resolves the wrong way.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    start = tl.program_id(0) * BLOCK
    offs = start + tl.arange(0, 2 * BLOCK)  # a power of two past BLOCK + 1
    end = tl.minimum(start + BLOCK, n)
    x = tl.load(x_ptr + offs, mask=offs < end, other=0.0).to(tl.float32)
    y = tl.where(x < 0.0, 0.0, x)
    # DEFECT: <= writes one element of the next block (with the masked load's 0)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=(offs <= end) & (offs < n))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _relu_kernel[(triton.cdiv(n, 512),)](x, out, n, BLOCK=512)
        return out
