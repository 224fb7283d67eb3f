"""Reference: softmax over the last dim of a (batch, rows, cols) tensor; benchmarked at batch 1."""

import torch
import torch.nn as nn

batch_size = 1
rows = 7
cols = 300


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, rows, cols)]


def get_init_inputs() -> list:
    return []
