"""DEFECT: row sum split over column blocks, partial sums combined with float atomic_add.

Floating-point addition is not associative, and the order in which blocks reach the atomic
changes from run to run on a GPU: the result is not bitwise reproducible. Must be rejected
by ORD-02 (device only: the interpreter runs programs in a fixed order).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_sum_atomic(x_ptr, out_ptr, x_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.atomic_add(out_ptr + row, tl.sum(x, axis=0))  # DEFECT: order-dependent float sum


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.zeros(n_rows, dtype=torch.float32, device=x.device)
        grid = (n_rows, triton.cdiv(n_cols, 32))
        _row_sum_atomic[grid](x, out, x.stride(0), n_cols, BLOCK=32)
        return out.to(x.dtype)
