"""Defect (CMP-02, unguarded precondition): a vectorised kernel that faults on misaligned data.

It is right wherever its input starts on a 16-byte boundary (any stride: it copies to a
contiguous buffer first), and on a misaligned start it does what a 16-byte vector load from
a misaligned address does on a GPU: it kills its process, here by reading address 16
(SIGSEGV), the CPU's stand-in for CUDA's "misaligned address".
"""

import ctypes

import torch
import torch.nn as nn
import triton
import triton.language as tl

ALIGNMENT = 16  # bytes, as a float4 load needs


@triton.jit
def _silu(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x / (1.0 + tl.exp(-x)), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.data_ptr() % ALIGNMENT:
            # the fault a misaligned vector load raises on a device
            ctypes.c_int.from_address(ALIGNMENT).value  # noqa: B018
        x = x.contiguous()
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        n = x.numel()
        _silu[(triton.cdiv(n, 256),)](x, out, n, BLOCK=256)
        return out
