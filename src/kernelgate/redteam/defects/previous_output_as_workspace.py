"""DEFECT: the previous call's output, already handed to the caller, serves as scratch.

Softmax in two launches, like the control `workspace_reused`, but instead of a workspace of
its own the module keeps a reference to the output it returned last and writes each row's
max and sum of exponentials into it before normalising into a fresh output. Every output is
right when it is returned and no storage is returned twice, yet the caller's previous result
is overwritten by the next call. Must be rejected by ORD-02 (a kept earlier output's bytes
change after a later call).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_stats(x_ptr, stats_ptr, x_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=-float("inf"))
    x = x.to(tl.float32)
    row_max = tl.max(x, axis=0)
    total = tl.sum(tl.exp(x - row_max), axis=0)
    tl.store(stats_ptr + 2 * row, row_max)
    tl.store(stats_ptr + 2 * row + 1, total)


@triton.jit
def _normalise(x_ptr, stats_ptr, out_ptr, x_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    row_max = tl.load(stats_ptr + 2 * row)
    total = tl.load(stats_ptr + 2 * row + 1)
    out = tl.exp(x - row_max) / total
    tl.store(out_ptr + row * out_stride + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self._last: torch.Tensor | None = None

    def _stats(self, n_rows: int, device: torch.device) -> torch.Tensor:
        last = self._last
        if (
            last is not None
            and last.device == device
            and last.dtype == torch.float32
            and last.is_contiguous()
            and last.numel() >= 2 * n_rows
        ):
            return last  # DEFECT: the caller's previous result, used as scratch
        return torch.empty(2 * n_rows, dtype=torch.float32, device=device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        stats = self._stats(n_rows, x.device)
        out = torch.empty_like(x)
        block = triton.next_power_of_2(n_cols)
        _row_stats[(n_rows,)](x, stats, x.stride(0), n_cols, BLOCK=block)
        _normalise[(n_rows,)](x, stats, out, x.stride(0), out.stride(0), n_cols, BLOCK=block)
        self._last = out
        return out
