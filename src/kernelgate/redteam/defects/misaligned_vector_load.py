"""DEFECT: assumes the input starts on a 16-byte boundary, as a float4 vector load does.

The start is rounded down to a multiple of four floats (what ``ld.global.v4`` from a
misaligned address effectively reads), so the result is right only at aligned offsets.
Must be rejected by CMP-02 (storage offsets that break 16-byte alignment).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, tl.where(x < 0.0, 0.0, x).to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        per_vector = max(16 // x.element_size(), 1)
        start = x.storage_offset() - x.storage_offset() % per_vector  # DEFECT
        x = x.as_strided(x.shape, x.stride(), start)
        out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        n = x.numel()
        _relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
