"""A candidate that writes one kernel (the row softmax, in Triton) and leaves the matmul to
the library (torch.matmul: cuBLAS on a device, aten on the CPU): some of its device time is
authored, some is not."""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_softmax(src, dst, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    keep = cols < n_cols
    x = tl.load(src + row * stride + cols, mask=keep, other=-float("inf"))
    x = tl.exp(x - tl.max(x, axis=0))
    tl.store(dst + row * stride + cols, x / tl.sum(x, axis=0), mask=keep)


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        h = torch.matmul(a, b).contiguous()
        out = torch.empty_like(h)
        rows, cols = h.shape
        _row_softmax[(rows,)](h, out, h.stride(0), cols, BLOCK=triton.next_power_of_2(cols))
        return out
