"""Control: two-pass row sum through a ``torch.empty`` scratch: each program of the first
pass writes its own slot (disjoint tiles), the second pass reads only the written slots
(masked), so the access trace finds no unwritten read and no race."""

import torch
import torch.nn as nn
import triton
import triton.language as tl

CHUNK = 128


@triton.jit
def _partial_sums(x_ptr, scratch_ptr, x_stride, n_cols, n_chunks, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    cols = chunk * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(scratch_ptr + row * n_chunks + chunk, tl.sum(x, axis=0))


@triton.jit
def _combine(scratch_ptr, out_ptr, n_chunks, SLOTS: tl.constexpr):
    row = tl.program_id(0)
    slots = tl.arange(0, SLOTS)
    partial = tl.load(scratch_ptr + row * n_chunks + slots, mask=slots < n_chunks, other=0.0)
    tl.store(out_ptr + row, tl.sum(partial, axis=0).to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        n_chunks = triton.cdiv(n_cols, CHUNK)
        scratch = torch.empty(n_rows, n_chunks, dtype=torch.float32, device=x.device)
        out = torch.empty(n_rows, dtype=x.dtype, device=x.device)
        _partial_sums[(n_rows, n_chunks)](x, scratch, x.stride(0), n_cols, n_chunks, BLOCK=CHUNK)
        _combine[(n_rows,)](scratch, out, n_chunks, SLOTS=triton.next_power_of_2(n_chunks))
        return out
