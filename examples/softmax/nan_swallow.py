"""Defective candidate: NaN inputs are silently replaced by 0.

Defect: after the masked load the kernel rewrites NaN elements to 0.0
(``tl.where(x != x, 0.0, x)``) before the max/exp, so a NaN in the input
never reaches the output; torch.softmax propagates NaN to the whole row.
Gate that must reject it: EXC-01. Expected verdict: REJECT.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, out_ptr, x_row_stride, out_row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    x = tl.where(x != x, 0.0, x)  # DEFECT: swallows NaN
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    out = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, out, mask=mask)


class ModelNew(nn.Module):
    """Row softmax (dim=1) that hides NaN inputs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        _softmax_kernel[(n_rows,)](
            x, out, x.stride(0), out.stride(0), n_cols, BLOCK=triton.next_power_of_2(n_cols)
        )
        return out
