"""A stable sort along rows with many ties: the tie order (ascending index) is part of it."""

import torch
import torch.nn as nn

batch = 8
width = 40


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.sort(x, dim=-1, stable=True)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randint(0, 5, (batch, width)).float()]


def get_init_inputs() -> list[int]:
    return []
