"""Defective candidate: forward terminates the whole process.

Defect: forward calls ``os._exit(0)``, which ends the interpreter
immediately with status 0, skipping finally blocks, atexit handlers and any
result reporting.
Gate that must reject it: RES-01 (the worker must report a result).
Expected verdict: REJECT.
"""

import os

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
    """Row softmax (dim=1) that exits the process."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        os._exit(0)  # DEFECT: kills the process with a "success" status
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        _softmax_kernel[(n_rows,)](
            x, out, x.stride(0), out.stride(0), n_cols, BLOCK=triton.next_power_of_2(n_cols)
        )
        return out
