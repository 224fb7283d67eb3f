"""DEFECT: partial row sums from several programs combined by a plain load-add-store.

Two programs that read out[row] before either stores lose one partial sum; which one is
lost depends on timing. Must be rejected by ORD-02 or CMP-01 on a device, or RES-01's
racecheck (device only: the interpreter runs programs one after another, so the
read-modify-write sequence never interleaves).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_sum_racy(x_ptr, out_ptr, x_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    partial = tl.sum(x, axis=0)
    current = tl.load(out_ptr + row)
    tl.store(out_ptr + row, current + partial)  # DEFECT: not atomic


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.zeros(n_rows, dtype=torch.float32, device=x.device)
        grid = (n_rows, triton.cdiv(n_cols, 32))
        _row_sum_racy[grid](x, out, x.stride(0), n_cols, BLOCK=32)
        return out.to(x.dtype)
