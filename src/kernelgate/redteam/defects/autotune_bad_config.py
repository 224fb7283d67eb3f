"""DEFECT: row sum autotuned over three configs, one of which is wrong.

The middle config unrolls the loop by two (``SPLIT=2``) and its second half reuses the
first half's mask (a copy-paste slip): at 1000 columns it sums 24 elements past each row's
end (the next row's, or past the buffer for the last row). The first and last configs are
right, so an instance that autotunes to either one verifies. Must be rejected by CMP-01:
every config of every autotuned kernel runs in a fresh instance (``config:1`` here).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": 256, "SPLIT": 1}, num_warps=4),
        triton.Config({"BLOCK": 256, "SPLIT": 2}, num_warps=4),
        triton.Config({"BLOCK": 512, "SPLIT": 1}, num_warps=8),
    ],
    key=["n_cols"],
)
@triton.jit
def _row_sum(x_ptr, out_ptr, x_stride, n_cols, BLOCK: tl.constexpr, SPLIT: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK * SPLIT):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        acc += tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
        if SPLIT == 2:
            # DEFECT: the second half is masked with the first half's columns
            acc += tl.load(x_ptr + row * x_stride + cols + BLOCK, mask=mask, other=0.0).to(
                tl.float32
            )
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty(n_rows, dtype=x.dtype, device=x.device)
        _row_sum[(n_rows,)](x, out, x.stride(0), n_cols)
        return out
