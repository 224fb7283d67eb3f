"""Integer row sums of token counts: an integer output, compared exactly."""

import torch
import torch.nn as nn

batch = 8
width = 32


class Model(nn.Module):
    def forward(self, counts: torch.Tensor) -> torch.Tensor:
        return counts.sum(dim=-1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randint(0, 1000, (batch, width))]


def get_init_inputs() -> list[int]:
    return []
