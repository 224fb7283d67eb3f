"""EXC-02 test reference: halve a small matrix (subnormals stay subnormal, -0 stays -0)."""

import torch
import torch.nn as nn

rows = 8
cols = 96


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 0.5


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(rows, cols)]


def get_init_inputs() -> list:
    return []
