"""DEFECT: two-pass row sum through a ``torch.empty`` scratch of at least 16 slots a row:
1000 columns in chunks of 128 make 8 partials, so the first pass writes 8 of the 16 slots
and the second loads all 16, discarding the 8 unwritten ones with ``tl.where``.

The values come out right (the poison is selected away), so no value gate sees it; on a
GPU it reads uninitialised memory (compute-sanitizer initcheck). Must be rejected by
RES-01 (the interpreter's access trace: a load of poisoned scratch no store wrote).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

CHUNK = 128
MIN_SLOTS = 16  # DEFECT: slots padded to 16, while only cdiv(n_cols, CHUNK) are written


@triton.jit
def _partial_sums(x_ptr, scratch_ptr, x_stride, n_cols, BLOCK: tl.constexpr, SLOTS: tl.constexpr):
    row = tl.program_id(0)
    chunk = tl.program_id(1)
    cols = chunk * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(scratch_ptr + row * SLOTS + chunk, tl.sum(x, axis=0))


@triton.jit
def _combine(scratch_ptr, out_ptr, n_chunks, SLOTS: tl.constexpr):
    row = tl.program_id(0)
    slots = tl.arange(0, SLOTS)
    partial = tl.load(scratch_ptr + row * SLOTS + slots)  # DEFECT: unwritten slots read too
    partial = tl.where(slots < n_chunks, partial, 0.0)
    tl.store(out_ptr + row, tl.sum(partial, axis=0).to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        n_chunks = triton.cdiv(n_cols, CHUNK)
        slots = max(MIN_SLOTS, triton.next_power_of_2(n_chunks))
        scratch = torch.empty(n_rows, slots, dtype=torch.float32, device=x.device)
        out = torch.empty(n_rows, dtype=x.dtype, device=x.device)
        _partial_sums[(n_rows, n_chunks)](x, scratch, x.stride(0), n_cols, BLOCK=CHUNK, SLOTS=slots)
        _combine[(n_rows,)](scratch, out, n_chunks, SLOTS=slots)
        return out
