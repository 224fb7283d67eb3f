"""Control: softmax in two launches through a scratch buffer kept across calls.

The first kernel writes each row's max and sum of exponentials into a workspace that the
module allocates once and reuses on every later call (growing it when a call has more rows);
the second normalises into a fresh output. Reusing scratch memory is honest: no caller ever
holds it. The outputs are new storage on every call, so ORD-02's check for outputs reused
across calls must pass it, and so must every other gate (the math is the `softmax` control's).
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
        self._workspace: dict[torch.device, torch.Tensor] = {}

    def _stats(self, n_rows: int, device: torch.device) -> torch.Tensor:
        """Scratch for (max, sum) per row: allocated once per device, grown when too small."""
        workspace = self._workspace.get(device)
        if workspace is None or workspace.numel() < 2 * n_rows:
            workspace = self._workspace[device] = torch.empty(
                2 * n_rows, dtype=torch.float32, device=device
            )
        return workspace

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        stats = self._stats(n_rows, x.device)
        out = torch.empty_like(x)
        block = triton.next_power_of_2(n_cols)
        _row_stats[(n_rows,)](x, stats, x.stride(0), n_cols, BLOCK=block)
        _normalise[(n_rows,)](x, stats, out, x.stride(0), out.stride(0), n_cols, BLOCK=block)
        return out
