"""Reference: ReLU of a (33, 129) matrix (odd sizes on both dims)."""

import torch
import torch.nn as nn

rows = 33
cols = 129


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(rows, cols)]


def get_init_inputs() -> list:
    return []
