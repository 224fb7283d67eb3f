"""DEFECT: results cached keyed by the inputs' data pointers.

Pointer-keyed caching is what CUDA-graph replay and "memoised" generated kernels do: when
the caller refills the same buffers (or the allocator hands back the same addresses) the
stale answer comes back. Must be rejected by ORD-02 (new values at recycled addresses) or
CMP-01.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, (a + b).to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self._memo: dict[tuple[int, int, int], torch.Tensor] = {}

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        key = (a.data_ptr(), b.data_ptr(), a.numel())
        hit = self._memo.get(key)
        if hit is not None:  # DEFECT: same addresses are assumed to hold the same values
            return hit.clone()
        a, b = a.contiguous(), b.contiguous()
        out = torch.empty_like(a)
        n = a.numel()
        _add_kernel[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024)
        self._memo[key] = out.clone()
        return out
