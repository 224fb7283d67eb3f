"""Row sum over (8, 3000): a small library "sum" reference (3000 = 2 x 1024 + 952)."""

import torch
import torch.nn as nn

rows = 8
cols = 3000


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(rows, cols)]


def get_init_inputs() -> list:
    return []
