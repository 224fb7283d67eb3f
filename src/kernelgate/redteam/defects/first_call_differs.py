"""DEFECT: row sum whose first call runs another summation than every later call.

The first call answers with ``torch.sum`` while the Triton kernel "warms up"; later calls
use the kernel, which sums in another order. Both are accurate (CMP-01 passes), but the
first call of every new process differs bitwise from the rest: the kernel is not
deterministic across calls or processes. A judge whose first call is one of CMP-01's cases
never compares it with anything. Must be rejected by ORD-02: a fresh instance's first call
on input A differs from the main instance's output for A.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_sum(x_ptr, out_ptr, x_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(acc, axis=0).to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.warm = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.warm:  # DEFECT: the first call takes another path
            self.warm = True
            return torch.sum(x, dim=1)
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty(n_rows, dtype=x.dtype, device=x.device)
        _row_sum[(n_rows,)](x, out, x.stride(0), n_cols, BLOCK=128)
        return out
