"""Reference: attention-style softmax of scaled scores, softmax(x * head_dim**-0.5)."""

import torch
import torch.nn as nn

batch_size = 13
dim = 300
head_dim = 64


class Model(nn.Module):
    def __init__(self, head_dim: int) -> None:
        super().__init__()
        self.scale = head_dim**-0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * self.scale, dim=-1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, dim)]


def get_init_inputs() -> list:
    return [head_dim]
