"""Reference: RMSNorm over the last dim (300) of a (16, 300) matrix, with a learned weight."""

import torch
import torch.nn as nn

batch_size = 16
features = 300


class Model(nn.Module):
    def __init__(self, features: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.rand(features) + 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, features)]


def get_init_inputs() -> list:
    return [features]
