"""DEFECT: row sum accumulated in fp16 (half the bandwidth, "good enough" on randn).

Inputs and output stay fp32. Must be rejected by PRC-02 (long one-signed rows).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_sum(x_ptr, out_ptr, x_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float16)  # DEFECT: fp16 accumulator
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=0.0)
        acc += x.to(tl.float16)
    total = tl.sum(acc, axis=0)
    tl.store(out_ptr + row, total.to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty(n_rows, dtype=x.dtype, device=x.device)
        _row_sum[(n_rows,)](x, out, x.stride(0), n_cols, BLOCK=128)
        return out
