"""Control: the linear layer in PyTorch, the log-sum-exp in Triton with the max guarded.

The row max is the shift that keeps ``exp`` finite, but an infinite max cannot be
subtracted (``inf - inf`` is NaN): like ``torch.logsumexp``, an infinite max shifts by 0
instead, so a row holding +Inf gives +Inf and a row of -Inf gives -Inf.
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
    shift = tl.where((top == float("inf")) | (top == -float("inf")), 0.0, top)
    total = tl.sum(tl.exp(x - shift), axis=0)
    tl.store(out_ptr + row, (tl.log(total) + shift).to(out_ptr.dtype.element_ty))


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
