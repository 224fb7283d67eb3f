"""Row softmax of a (batch, dim) float32 matrix; ``batch`` and ``dim`` are the size shims
``shapes.py`` sets."""

import torch
import torch.nn as nn

batch = 8
dim = 100


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch, dim)]


def get_init_inputs() -> list:
    return []
