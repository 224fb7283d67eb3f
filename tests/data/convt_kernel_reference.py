"""Reference with a size that shapes no input: ``kernel_size`` grows the weights and outputs.

CMP-03's input cap cannot see it; its footprint limit must keep every held-out kernel size
affordable (a kernel of 4096 here would need hundreds of millions of weights).
"""

import torch
import torch.nn as nn

batch = 2
channels = 2
side = 8
kernel_size = 4


class Model(nn.Module):
    def __init__(self, channels: int, kernel_size: int) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(channels, 3, kernel_size, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.up(x))


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch, channels, side, side)]


def get_init_inputs() -> list:
    return [channels, kernel_size]
