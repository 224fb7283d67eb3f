"""Top-k with ties: values drawn from a few integers, so most rows tie at the k-th value."""

import torch
import torch.nn as nn

batch = 16
width = 64
k = 8


class Model(nn.Module):
    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.topk(x, self.k, dim=-1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randint(0, 4, (batch, width)).float()]


def get_init_inputs() -> list[int]:
    return [k]
