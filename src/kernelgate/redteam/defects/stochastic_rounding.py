"""DEFECT: GELU whose fp32 result is stochastically rounded to the bf16 grid with a fresh
random seed per call ("unbiased low-precision output"). Two calls on the same input differ,
and the error is bf16-sized. Must be rejected by ORD-02 (not bitwise reproducible) or
PRC-01 (outside the fp32 bound).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gelu_sr(x_ptr, out_ptr, n, seed, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    y = 0.5 * x * (1.0 + tl.erf(x * 0.7071067811865476))
    bits = y.to(tl.int32, bitcast=True)
    noise = (tl.randint(seed, offs) & 0xFFFF).to(tl.int32)  # DEFECT: random per call
    rounded = ((bits + noise) & -65536).to(tl.float32, bitcast=True)
    tl.store(out_ptr + offs, rounded.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        seed = int(torch.randint(0, 2**31 - 1, (1,)))
        _gelu_sr[(triton.cdiv(n, 1024),)](x, out, n, seed, BLOCK=1024)
        return out
