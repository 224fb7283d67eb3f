"""Defect: the log-sum-exp subtracts its row max even when that max is +Inf.

``m + log(sum(exp(x - m)))`` is the textbook stable form, and it is right for every finite
row. A row holding +Inf has ``m = inf`` and ``inf - inf = NaN``: the kernel answers NaN
where ``torch.logsumexp`` answers +Inf. Scattered specials never show it behind a linear
layer (several infinities per row meet with both signs and the oracle's answer is NaN as
well); one +Inf per row does. Must be rejected by EXC-01.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _logsumexp_rows(x_ptr, out_ptr, x_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * x_stride + cols, mask=cols < n_cols, other=-float("inf"))
    x = x.to(tl.float32)
    top = tl.max(x, axis=0)
    total = tl.sum(tl.exp(x - top), axis=0)
    tl.store(out_ptr + row, (tl.log(total) + top).to(out_ptr.dtype.element_ty))


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x).contiguous()
        n_rows, n_cols = y.shape
        out = torch.empty(n_rows, 1, dtype=y.dtype, device=y.device)
        block = triton.next_power_of_2(n_cols)
        _logsumexp_rows[(n_rows,)](y, out, y.stride(0), n_cols, BLOCK=block)
        return out
