"""Reference: fp16 matmul (32 x 128) @ (128 x 48), fp16 in and out."""

import torch
import torch.nn as nn

M = 32
K = 128
N = 48


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)]


def get_init_inputs() -> list:
    return []
