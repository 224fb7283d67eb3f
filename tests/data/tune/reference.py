"""Tiny row softmax for the tuner's tests: 5 rows (odd), 40 columns (not a power of two)."""

import torch
import torch.nn as nn

batch_size = 5
dim = 40


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, dim)]


def get_init_inputs() -> list:
    return []
