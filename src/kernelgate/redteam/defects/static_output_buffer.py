"""DEFECT: the output buffer is allocated once and returned, rewritten, on every call.

A generated kernel "saves an allocation per call": the first call at a shape allocates the
output, every later call at that shape writes its answer into the same buffer and returns
it. Each answer is right when it is returned, but the caller's earlier result is the same
storage, so the next call silently changes it (as a replayed CUDA graph's static output
does). Must be rejected by ORD-02 (a kept earlier output shares storage with a later one,
and its bytes change after the later call).
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
        self._outputs: dict[tuple, torch.Tensor] = {}

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = torch.broadcast_tensors(a, b)
        a, b = a.contiguous(), b.contiguous()
        dtype = torch.result_type(a, b)
        key = (tuple(a.shape), dtype, a.device)
        out = self._outputs.get(key)
        if out is None:  # DEFECT: one buffer per shape, handed to every caller
            out = self._outputs[key] = torch.empty(a.shape, dtype=dtype, device=a.device)
        n = a.numel()
        _add_kernel[(triton.cdiv(n, 1024),)](a, b, out, n, BLOCK=1024)
        return out
