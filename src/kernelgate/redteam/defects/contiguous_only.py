"""DEFECT: indexes rows with the logical width as the row stride and never calls
``.contiguous()``: right for the benchmark's contiguous input, wrong for a strided or
transposed view. Must be rejected by CMP-02.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf")).to(tl.float32)
    num = tl.exp(x - tl.max(x, axis=0))
    out = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * n_cols + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_rows, n_cols = x.shape
        out = torch.empty((n_rows, n_cols), dtype=x.dtype, device=x.device)
        block = triton.next_power_of_2(n_cols)
        _softmax_kernel[(n_rows,)](x, out, n_cols, BLOCK=block)  # DEFECT: assumes stride n_cols
        return out
