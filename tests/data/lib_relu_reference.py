"""Elementwise ReLU over (16, 130): a library "relu" reference with no reduction."""

import torch
import torch.nn as nn

batch = 16
dim = 130


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch, dim)]


def get_init_inputs() -> list:
    return []
