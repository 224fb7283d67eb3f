"""A Triton kernel that stores far outside any allocation: an illegal address on a GPU."""

import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(out_ptr + offs + (1 << 40), tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


class ModelNew(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        _kernel[(1,)](out, 16, BLOCK=16)
        return out
