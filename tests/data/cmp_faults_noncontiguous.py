"""Defect (CMP-02, unguarded precondition): a kernel that faults on any non-contiguous input.

It indexes ``x_ptr + i`` as a contiguous kernel does and, rather than guarding that
precondition (``x.contiguous()`` or a clean error), kills its process on a strided,
transposed or broadcast view, as an out-of-range gather does on a GPU (here by reading
address 16: SIGSEGV). Right on contiguous inputs at any offset.
"""

import ctypes

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _silu(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, x / (1.0 + tl.exp(-x)), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_contiguous():
            ctypes.c_int.from_address(16).value  # noqa: B018  the fault an illegal address is
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        n = x.numel()
        _silu[(triton.cdiv(n, 256),)](x, out, n, BLOCK=256)
        return out
