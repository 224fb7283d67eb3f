"""DEFECT: softmax over (batch, rows, cols) that launches one program per row of batch 0
only: right at the benchmark's batch of 1; later batches keep the zeros the output was
initialised with. Must be rejected by CMP-03 (held-out batch sizes).
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
        x = x.contiguous()
        _, rows, n_cols = x.shape
        out = torch.zeros_like(x)
        # DEFECT: grid covers x[0] only
        _softmax_kernel[(rows,)](x, out, n_cols, BLOCK=triton.next_power_of_2(n_cols))
        return out
