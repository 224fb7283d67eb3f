"""Reference: LayerNorm over the last dim (300) of a (16, 300) matrix, with affine weights."""

import torch
import torch.nn as nn

batch_size = 16
features = 300


class Model(nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(features)
        with torch.no_grad():  # non-trivial affine parameters
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, features)]


def get_init_inputs() -> list:
    return [features]
