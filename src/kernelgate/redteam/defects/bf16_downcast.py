"""DEFECT: GELU computed in bf16 behind fp32 inputs and outputs ("mixed precision").

The inputs are cast to bf16 on the host, the kernel computes and stores bf16, and the
result is cast back to fp32. Must be rejected by PRC-01 (fp32 bound) or CMP-01.
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
    tl.store(out_ptr + offs, y.to(tl.bfloat16), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        low = x.contiguous().to(torch.bfloat16)  # DEFECT: silent downcast
        out = torch.empty_like(low)
        n = low.numel()
        _gelu_kernel[(triton.cdiv(n, 1024),)](low, out, n, BLOCK=1024)
        return out.to(x.dtype)
