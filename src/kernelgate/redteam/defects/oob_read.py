"""DEFECT: row sum with an unmasked load of a power-of-two block (1024 for 1000 columns).

Each row also sums the first 24 elements of the next row, and the last row reads 96 bytes
past the end of the buffer. Must be rejected by MEM-01 (the output depends on what lies
past the buffer) or CMP-01.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_sum(x_ptr, out_ptr, x_stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_stride + cols)  # DEFECT: no mask
    tl.store(out_ptr + row, tl.sum(x.to(tl.float32), axis=0).to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty(n_rows, dtype=x.dtype, device=x.device)
        _row_sum[(n_rows,)](x, out, x.stride(0), BLOCK=triton.next_power_of_2(n_cols))
        return out
