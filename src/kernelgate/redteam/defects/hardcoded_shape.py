"""DEFECT: the row length is a module constant copied from the benchmark (dim = 300).

Right at (13, 300); at any other width the kernel reads and normalises the wrong elements.
Must be rejected by CMP-03 (held-out shapes).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

DIM = 300  # DEFECT: hard-coded from the problem statement
BLOCK_SIZE = 512


@triton.jit
def _softmax_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr, N_COLS: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < N_COLS
    x = tl.load(x_ptr + row * N_COLS + cols, mask=mask, other=-float("inf")).to(tl.float32)
    num = tl.exp(x - tl.max(x, axis=0))
    out = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * N_COLS + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        rows = x.numel() // DIM
        _softmax_kernel[(rows,)](x, out, BLOCK=BLOCK_SIZE, N_COLS=DIM)
        return out
