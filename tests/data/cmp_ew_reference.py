"""Small KernelBench-style reference for CMP-02/03 tests: SiLU over a (rows, cols) matrix.

rows * cols = 1024 at the reference shape, so a kernel that covers exactly one 1024-wide
block, or masks only whole 256-wide blocks, is right here and wrong at other shapes.
"""

import torch
import torch.nn as nn

rows = 4
cols = 256


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(rows, cols)]


def get_init_inputs() -> list:
    return []
