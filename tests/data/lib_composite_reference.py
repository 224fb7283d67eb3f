"""A composite reference (matmul, then ReLU, then a sum): no single library entry."""

import torch
import torch.nn as nn

M = 8
K = 16


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.relu(a @ b).sum(dim=1)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(M, K), torch.randn(K, K)]


def get_init_inputs() -> list:
    return []
