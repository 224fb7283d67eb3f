"""Control: row sum split in two halves per row, combined with ``tl.atomic_add`` into a
zeroed float64 buffer, rounded once to the input's dtype. Two addends into 0.0 give the same
bits in either order (0 + a + b == 0 + b + a), so the result is deterministic on a GPU too;
the access trace sees two programs writing one address, by atomics, which is no race.

Why float64: a GPU's float32 atomic add flushes subnormal operands and results to zero
(PTX ``atom.add.f32``), so a float32 buffer loses a row of subnormals (EXC-02 rejected it
on the H200, rightly); ``atom.add.f64`` keeps them, and every float32 is normal there."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _half_row_sum(x_ptr, out_ptr, x_stride, n_cols, half, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    begin = tl.program_id(1) * half
    end = tl.minimum(begin + half, n_cols)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, half, BLOCK):
        cols = begin + start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * x_stride + cols, mask=cols < end, other=0.0).to(tl.float32)
    tl.atomic_add(out_ptr + row, tl.sum(acc, axis=0).to(tl.float64))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.zeros(n_rows, dtype=torch.float64, device=x.device)
        half = triton.cdiv(n_cols, 2)
        _half_row_sum[(n_rows, 2)](x, out, x.stride(0), n_cols, half, BLOCK=256)
        return out.to(x.dtype)
