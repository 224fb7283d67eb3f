"""Control: elementwise add that times two block sizes on its first call and keeps the
faster. Each element is computed alike whichever block size runs, so the output is
bitwise the same either way: CMP-01's adversarial-clock instances must verify it.
"""

import time

import torch
import torch.nn as nn
import triton
import triton.language as tl

BLOCKS = (256, 1024)


@triton.jit
def _add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    a = tl.load(a_ptr + offs, mask=mask).to(tl.float32)
    b = tl.load(b_ptr + offs, mask=mask).to(tl.float32)
    tl.store(out_ptr + offs, (a + b).to(out_ptr.dtype.element_ty), mask=mask)


def _launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, block: int) -> None:
    n = a.numel()
    _add_kernel[(triton.cdiv(n, block),)](a, b, out, n, BLOCK=block)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = None

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a, b = torch.broadcast_tensors(a, b)
        a, b = a.contiguous(), b.contiguous()
        out = torch.empty(a.shape, dtype=torch.result_type(a, b), device=a.device)
        if self.block is None:  # first call: time each block size once, keep the faster
            seconds = {}
            for block in BLOCKS:
                started = time.perf_counter()
                _launch(a, b, out, block)
                if a.is_cuda:
                    torch.cuda.synchronize()
                seconds[block] = time.perf_counter() - started
            self.block = min(seconds, key=seconds.get)
        _launch(a, b, out, self.block)
        return out
