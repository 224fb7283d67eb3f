"""Tuner test candidate: row softmax autotuned over two configs, the second one wrong.

Config 0 (ROWS=1) is right. Config 1 (ROWS=2) launches ``n_rows // 2`` programs (floor,
not ceil), so with an odd row count the last row of the ``torch.empty_like`` output is
never written. The tuner must judge each config pinned and never choose config 1.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[triton.Config({"ROWS": 1}, num_warps=1), triton.Config({"ROWS": 2}, num_warps=1)],
    key=["n_cols"],
)
@triton.jit
def _rows_softmax(x_ptr, out_ptr, stride, n_cols, BLOCK: tl.constexpr, ROWS: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for r in tl.static_range(ROWS):
        row = tl.program_id(0) * ROWS + r
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
        x = x - tl.max(x, axis=0)
        num = tl.exp(x)
        tl.store(out_ptr + row * stride + cols, num / tl.sum(num, axis=0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)

        def grid(meta: dict) -> tuple[int]:
            return (n_rows // meta["ROWS"],)  # DEFECT for ROWS=2: floor drops the odd row

        _rows_softmax[grid](x, out, x.stride(0), n_cols, BLOCK=triton.next_power_of_2(n_cols))
        return out
