"""Defective candidate: four rows per program, tail rows never written.

Defect: each program handles ``ROWS_PER_PROGRAM = 4`` rows and the grid is
``n_rows // 4`` (floor, not ceil), so when ``n_rows % 4 != 0`` the last
rows of the ``torch.empty_like`` output keep whatever memory held before
(rows 28 and 29 for the 30-row reference input).
Gate that must reject it: MEM-01. Expected verdict: REJECT.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

ROWS_PER_PROGRAM = 4


@triton.jit
def _softmax_kernel(
    x_ptr, out_ptr, x_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr, ROWS: tl.constexpr
):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for r in tl.static_range(ROWS):
        row = tl.program_id(0) * ROWS + r
        x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf"))
        x = x.to(tl.float32)
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        out = num / tl.sum(num, axis=0)
        tl.store(out_ptr + row * out_row_stride + cols, out, mask=mask)


class ModelNew(nn.Module):
    """Row softmax (dim=1), rows batched four per program."""

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
