"""Reference: fp32 matmul (33 x 128) @ (128 x 47): odd M and N, K a multiple of 32."""

import torch
import torch.nn as nn

M = 33
K = 128
N = 47


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs() -> list:
    return []
