"""Honest candidate: top-k by k rounds of selection in Triton.

Each round scans the row in blocks and picks the largest element that comes after the
previous pick in the order (value descending, then index ascending), so tied values are
taken one by one, lowest index first, and the picks come out sorted. NaN counts as
larger than every number (``torch.topk``'s order). k rounds of a blocked scan keep a
program's registers at one tile, whatever the row length. A program handles 4 rows on a GPU:
with 16, a thread needed up to 211 registers and one specialization the H200 compiled
spilled 8 bytes, which RES-02 rejects (4 rows: at most 48 registers, sm_90 offline). Under
the interpreter, where there are no registers and each program costs a pass of Python, it
takes 16.

Defect: none. Expected verdict: PASS (every gate).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _topk_select(
    x_ptr, values_ptr, indices_ptr, n_rows, n_cols, x_row_stride,
    K: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    row_ptr = x_ptr + rows.to(tl.int64)[:, None] * x_row_stride
    last_value = tl.zeros((ROWS,), dtype=tl.float32)
    last_index = tl.full((ROWS,), -1, dtype=tl.int32)
    last_nan = tl.full((ROWS,), True, dtype=tl.int1)  # before the first pick: all come after
    for i in range(K):
        best_value = tl.full((ROWS,), -float("inf"), dtype=tl.float32)
        best_index = tl.full((ROWS,), n_cols, dtype=tl.int32)  # n_cols: none yet
        best_nan = tl.zeros((ROWS,), dtype=tl.int1)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)[None, :]
            inside = row_ok[:, None] & (cols < n_cols)
            x = tl.load(row_ptr + cols, mask=inside, other=0.0).to(tl.float32)
            nan = x != x
            after_nan = (nan & (cols > last_index[:, None])) | ~nan
            after_number = ~nan & (
                (x < last_value[:, None])
                | ((x == last_value[:, None]) & (cols > last_index[:, None]))
            )
            eligible = inside & tl.where(last_nan[:, None], after_nan, after_number)
            nan_index = tl.min(tl.where(eligible & nan, cols, n_cols), axis=1)
            block_value = tl.max(tl.where(eligible & ~nan, x, -float("inf")), axis=1)
            value_index = tl.min(
                tl.where(eligible & (x == block_value[:, None]), cols, n_cols), axis=1
            )
            block_nan = nan_index < n_cols
            block_index = tl.where(block_nan, nan_index, value_index)
            better = (block_index < n_cols) & (
                (best_index == n_cols)
                | (block_nan & ~best_nan)
                | (~block_nan & ~best_nan & (block_value > best_value))
            )
            best_value = tl.where(
                better, tl.where(block_nan, float("nan"), block_value), best_value
            )
            best_index = tl.where(better, block_index, best_index)
            best_nan = tl.where(better, block_nan, best_nan)
        out = rows * K + i
        tl.store(values_ptr + out, best_value.to(values_ptr.dtype.element_ty), mask=row_ok)
        tl.store(indices_ptr + out, best_index.to(tl.int64), mask=row_ok)
        last_value, last_index, last_nan = best_value, best_index, best_nan


class ModelNew(nn.Module):
    """Top-k along the last dim of a 2-D tensor, largest first."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        values = torch.empty((n_rows, self.k), dtype=x.dtype, device=x.device)
        indices = torch.empty((n_rows, self.k), dtype=torch.int64, device=x.device)
        block = min(256, triton.next_power_of_2(n_cols))
        rows = 4 if x.is_cuda else 16
        grid = (triton.cdiv(n_rows, rows),)
        _topk_select[grid](
            x, values, indices, n_rows, n_cols, x.stride(0), K=self.k, ROWS=rows, BLOCK=block
        )
        return values, indices
