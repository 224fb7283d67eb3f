"""DEFECT: one block of 1024 columns per row, no loop: right while rows fit in one block
(the benchmark's 1000 columns), silently truncated beyond. Must be rejected by CMP-03.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCK_SIZE = 1024


@triton.jit
def _row_sum(x_ptr, out_ptr, x_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=0.0)  # DEFECT
    tl.store(out_ptr + row, tl.sum(x.to(tl.float32), axis=0).to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty(n_rows, dtype=x.dtype, device=x.device)
        _row_sum[(n_rows,)](x, out, x.stride(0), n_cols, BLOCK=BLOCK_SIZE)
        return out
