"""DEFECT: four rows per program with a floor-divided grid: when rows % 4 != 0 the last
rows of the ``torch.empty`` output are never written (13 rows: row 12 keeps old memory).

Must be rejected by MEM-01 (the output changes with the poison in fresh allocations).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

ROWS_PER_PROGRAM = 4


@triton.jit
def _softmax_kernel(
    x_ptr, out_ptr, x_stride, out_stride, n_cols, BLOCK: tl.constexpr, ROWS: tl.constexpr
):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for r in tl.static_range(ROWS):
        row = tl.program_id(0) * ROWS + r
        x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=-float("inf"))
        x = x.to(tl.float32)
        num = tl.exp(x - tl.max(x, axis=0))
        out = num / tl.sum(num, axis=0)
        tl.store(out_ptr + row * out_stride + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        grid = (n_rows // ROWS_PER_PROGRAM,)  # DEFECT: should be triton.cdiv(n_rows, 4)
        _softmax_kernel[grid](
            x,
            out,
            x.stride(0),
            out.stride(0),
            n_cols,
            BLOCK=triton.next_power_of_2(n_cols),
            ROWS=ROWS_PER_PROGRAM,
        )
        return out
