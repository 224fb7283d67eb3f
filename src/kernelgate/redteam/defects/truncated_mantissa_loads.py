"""DEFECT: row sum that keeps 13 of an fp32 input's 23 fraction bits (a "compressed" load
that halves the bytes a real kernel would read), then accumulates honestly in fp32.

Each term loses up to 2^-13 of itself, always towards zero, so on one-signed rows the
errors add up: about 3x the order bound at N = 1000, the subtlest defect of the red team
(everything else sits at 17x or more). Must be rejected by PRC-02, CMP-01 or CMP-03.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

KEPT_FRACTION_BITS = 13


@triton.jit
def _row_sum(x_ptr, out_ptr, x_stride, n_cols, KEEP_MASK: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=0.0)
        kept = x.to(tl.int32, bitcast=True) & KEEP_MASK  # DEFECT: low fraction bits dropped
        acc += kept.to(tl.float32, bitcast=True)
    total = tl.sum(acc, axis=0)
    tl.store(out_ptr + row, total.to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # fp16 and bf16 inputs have at most 10 fraction bits: the cut keeps them exact
        x32 = x.contiguous().float()
        n_rows, n_cols = x32.shape
        out = torch.empty(n_rows, dtype=torch.float32, device=x.device)
        keep_mask = -(1 << (23 - KEPT_FRACTION_BITS))  # sign, exponent and 13 fraction bits
        _row_sum[(n_rows,)](x32, out, x32.stride(0), n_cols, KEEP_MASK=keep_mask, BLOCK=128)
        return out.to(x.dtype)
