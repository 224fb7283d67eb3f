"""DEFECT: allocates the output and returns it without computing anything.

In a harness that runs the reference first and frees its output, the caching allocator
hands the same block back, so the "result" holds the reference's answer (KernelBench PR 82).
Must be rejected by MEM-01 (the output is whatever fresh memory held) or CMP-01.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _noop_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.debug_barrier()
    _ = offs < n


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)  # DEFECT: recycled memory stands in for the result
        _noop_kernel[(1,)](out, out.numel(), BLOCK=128)
        return out
