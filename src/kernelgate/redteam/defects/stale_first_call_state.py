"""DEFECT: LayerNorm that computes the row statistics on the first call ("warm-up") and
reuses them on every later call, like a running-stats buffer that is never refreshed.

Must be rejected by ORD-02 (stale state across calls) or CMP-01 (later inputs are
normalised with the first input's mean and variance).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _stats(x_ptr, mean_ptr, rstd_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n_cols
    centred = tl.where(mask, x - mean, 0.0)
    var = tl.sum(centred * centred, axis=0) / n_cols
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, 1.0 / tl.sqrt(var + eps))


@triton.jit
def _normalise(x_ptr, w_ptr, b_ptr, mean_ptr, rstd_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    y = (x - tl.load(mean_ptr + row)) * tl.load(rstd_ptr + row) * w + b
    tl.store(out_ptr + row * n_cols + cols, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(features)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)
        self._stats: tuple[torch.Tensor, torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_cols = x.shape[-1]
        rows = x.numel() // n_cols
        block = triton.next_power_of_2(n_cols)
        if self._stats is None or self._stats[0].numel() != rows:  # DEFECT: first call only
            mean = torch.empty(rows, dtype=torch.float32, device=x.device)
            rstd = torch.empty(rows, dtype=torch.float32, device=x.device)
            _stats[(rows,)](x, mean, rstd, n_cols, self.norm.eps, BLOCK=block)
            self._stats = (mean, rstd)
        mean, rstd = self._stats
        out = torch.empty_like(x)
        _normalise[(rows,)](
            x, self.norm.weight, self.norm.bias, mean, rstd, out, n_cols, BLOCK=block
        )
        return out
