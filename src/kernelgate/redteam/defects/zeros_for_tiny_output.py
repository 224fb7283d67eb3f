"""DEFECT: returns zeros; every |output| is below 1e-2, so allclose(atol=1e-2) accepts it.

KernelBench issue 165: problems whose outputs are tiny are "solved" by an empty kernel.
Must be rejected by CMP-01 (the bound is relative to the oracle, not an absolute 1e-2).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _fill_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros((BLOCK,), tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        n = x.numel()
        _fill_kernel[(triton.cdiv(n, 1024),)](out, n, BLOCK=1024)  # DEFECT: never reads x
        return out
