"""KernelBench-style reference: a linear layer on fp8 (e4m3) activations and weights.

Activations carry one float32 scale for the whole tensor, weights one per output row (per
channel), the layout of fp8 inference GEMMs. As in their epilogues (``torch._scaled_mm``),
the fp8 values are multiplied and summed in float32 and the sum is scaled; the output is
float32, so the judge can tell a float32 product from one whose operands were rounded to
a narrower type first.
``m`` is not a multiple of the kernels' row block, ``n`` not one of their column block.
"""

import torch
import torch.nn as nn

m = 13
k = 128
n = 80


class Model(nn.Module):
    """``(x @ w.T) * x_scale * w_scale`` in the scales' dtype."""

    def forward(
        self, x: torch.Tensor, w: torch.Tensor, x_scale: torch.Tensor, w_scale: torch.Tensor
    ) -> torch.Tensor:
        return (x.to(x_scale.dtype) @ w.to(w_scale.dtype).T) * x_scale * w_scale


def get_inputs() -> list[torch.Tensor]:
    """fp8 activations and weights (normal draws rounded to e4m3) and their float32 scales."""
    x = torch.randn(m, k).to(torch.float8_e4m3fn)
    w = torch.randn(n, k).to(torch.float8_e4m3fn)
    x_scale = torch.rand(1) * 0.5 + 0.75
    w_scale = torch.rand(n) * 0.02 + 0.01
    return [x, w, x_scale, w_scale]


def get_init_inputs() -> list:
    return []
