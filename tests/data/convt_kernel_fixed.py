"""Defect (CMP-03): kernel_size hard-coded to 4, the reference's value. Right there (same
seeded weights), a wrong output shape at any other kernel size."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, channels: int, kernel_size: int) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(channels, 3, 4, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.up(x))
