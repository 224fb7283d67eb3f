"""Control (AUTH-01 in force): the softmax is the candidate's own Triton kernel, the gain's
small GEMM is left to torch (F.linear: cuBLAS on a device, aten on the CPU).

Honest mixed authorship: the kernel does the work (a streaming softmax over rows of 16384
elements, scaled by the gain), the library does one 2 x 256 x 2 GEMM. One program per row walks
the row twice in blocks of 1024 (32 dependent block loads on a device: latency-bound, tens
of microseconds), while the GEMM is one small cuBLAS launch (a few microseconds), so the
authored share is well over AUTH-01's half on a device; on the CPU the interpreter makes it
higher still. docs/redteam.md gives the arithmetic.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _gained_softmax(x_ptr, gain_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row * n_cols
    # per-lane running max and rescaled sum: no block reduction inside the loop
    m = tl.full((BLOCK,), -float("inf"), tl.float32)
    s = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf"))
        # tl.maximum drops NaN by default; a NaN anywhere must poison the whole row
        m_new = tl.maximum(m, x, propagate_nan=tl.PropagateNan.ALL)
        # lanes that have seen only -inf keep a zero sum (no inf - inf)
        alpha = tl.where(m_new == -float("inf"), 0.0, tl.exp(m - m_new))
        p = tl.where(m_new == -float("inf"), 0.0, tl.exp(x - m_new))
        s = s * alpha + p
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - row_max), axis=0)
    gain = tl.load(gain_ptr + row)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=-float("inf"))
        y = tl.exp(x - row_max) / total  # the softmax, then the gain, as the reference
        tl.store(out_ptr + row * n_cols + cols, y * gain, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, context: int, heads: int) -> None:
        super().__init__()
        self.gain = nn.Linear(context, heads, bias=False)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        gain = F.linear(ctx, self.gain.weight)  # the library's GEMM: one launch
        x = x.contiguous()
        out = torch.empty_like(x)
        n_cols = x.shape[-1]
        rows = x.numel() // n_cols if n_cols else 0
        if rows:
            _gained_softmax[(rows,)](x, gain.contiguous(), out, n_cols, BLOCK=1024)
        return out
