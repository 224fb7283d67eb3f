"""C = A @ B with A (32, 64) and B (64, 48): a small library "matmul" reference."""

import torch
import torch.nn as nn

M = 32
K = 64
N = 48


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs() -> list:
    return []
