"""Reference: max over dim 1 of a (17, 1000) matrix (values only)."""

import torch
import torch.nn as nn

batch_size = 17
dim = 1000


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, dim)]


def get_init_inputs() -> list:
    return []
