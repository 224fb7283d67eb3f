"""Reference: softmax over long rows (2 x 2 heads x 16384, vocabulary-like), each head's row
scaled by a gain that a small bias-free linear layer computes from a context (2 x 256 -> 2).

The red team's ``authored_with_cublas_gemm`` control: a candidate may leave the gain's GEMM
to the library and write the softmax itself, and still have most of the device time.
"""

import torch
import torch.nn as nn

batch_size = 2
heads = 2
n_cols = 16384
context = 256


class Model(nn.Module):
    def __init__(self, context: int, heads: int) -> None:
        super().__init__()
        self.gain = nn.Linear(context, heads, bias=False)

    def forward(self, x: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1) * self.gain(ctx)[..., None]


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, heads, n_cols), torch.randn(batch_size, context)]


def get_init_inputs() -> list:
    return [context, heads]
