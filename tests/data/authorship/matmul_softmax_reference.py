"""KernelBench-style reference: a matmul, then a row softmax of its result."""

import torch
import torch.nn as nn

batch, inner, width = 64, 512, 96


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.softmax(a @ b, dim=1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch, inner), torch.randn(inner, width)]


def get_init_inputs() -> list:
    return []
