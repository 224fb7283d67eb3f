"""Reference: elementwise sum of two vectors (4096 elements: a multiple of every block size)."""

import torch
import torch.nn as nn

n = 4096


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(n), torch.randn(n)]


def get_init_inputs() -> list:
    return []
