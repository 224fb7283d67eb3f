"""Defect: the right k elements in the wrong order. The selection rounds only find the k-th
element; a second pass then writes every element up to it (larger values, and ties at
lower indices) in column order, as ``sorted=False`` may, where the reference asks
``sorted=True``: largest first. With ties among small integers, rows come out unsorted.

Expected verdict: REJECT by CMP-01.
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
    for _round in range(K):
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
        last_value, last_index, last_nan = best_value, best_index, best_nan
    # DEFECT: the chosen elements (none of them after the k-th pick) go out in column order.
    written = tl.zeros((ROWS,), dtype=tl.int32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)[None, :]
        inside = row_ok[:, None] & (cols < n_cols)
        x = tl.load(row_ptr + cols, mask=inside, other=0.0)
        nan = x != x
        after_nan = (nan & (cols > last_index[:, None])) | ~nan
        after_number = ~nan & (
            (x < last_value[:, None]) | ((x == last_value[:, None]) & (cols > last_index[:, None]))
        )
        chosen = inside & ~tl.where(last_nan[:, None], after_nan, after_number)
        slot = written[:, None] + tl.cumsum(chosen.to(tl.int32), axis=1) - 1
        out = rows[:, None] * K + slot
        tl.store(values_ptr + out, x, mask=chosen)
        tl.store(indices_ptr + out, cols.to(tl.int64), mask=chosen)
        written += tl.sum(chosen.to(tl.int32), axis=1)


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
        grid = (triton.cdiv(n_rows, 16),)
        _topk_select[grid](
            x, values, indices, n_rows, n_cols, x.stride(0), K=self.k, ROWS=16, BLOCK=block
        )
        return values, indices
