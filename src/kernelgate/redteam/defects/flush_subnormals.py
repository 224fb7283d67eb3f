"""DEFECT: flushes subnormal results to zero (what ``-ftz=true`` / fast-math does), written
out as a select so the interpreter shows it too. Invisible to any tolerance: the error is
below 1.2e-38. Must be rejected by EXC-02.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_kernel(x_ptr, out_ptr, n, tiny, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = tl.where(x < 0.0, 0.0, x)
    y = tl.where(tl.abs(y) < tiny, 0.0, y)  # DEFECT: flush to zero
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        tiny = torch.finfo(x.dtype).tiny
        _relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, tiny, BLOCK=1024)
        return out
