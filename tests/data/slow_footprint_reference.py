"""Reference whose forward loops in Python: on the meta device, measuring it at a large
``steps`` takes long, which the footprint's measuring time must bound."""

import torch
import torch.nn as nn

batch = 2
width = 8
steps = 8


class Model(nn.Module):
    def __init__(self, width: int, steps: int) -> None:
        super().__init__()
        self.cell = nn.Linear(width, width)
        self.steps = steps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.steps):
            x = torch.tanh(self.cell(x))
        return x


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch, width)]


def get_init_inputs() -> list:
    return [width, steps]
