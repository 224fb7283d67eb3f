"""Defective candidate: forward never returns.

Defect: before launching the (otherwise honest) kernel, forward enters
``while True: pass``, hanging the process at 100% of one CPU core.
Gate that must reject it: RES-01 (wall-clock limit). Expected verdict: REJECT.
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
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    out = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_row_stride + cols, out, mask=mask)


class ModelNew(nn.Module):
    """Row softmax (dim=1) that hangs."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        while True:  # DEFECT: hang
            pass
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        _softmax_kernel[(n_rows,)](
            x, out, x.stride(0), out.stride(0), n_cols, BLOCK=triton.next_power_of_2(n_cols)
        )
        return out
