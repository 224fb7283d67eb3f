"""KernelBench-style reference: row softmax over a (30, 1000) matrix.

``dim`` is deliberately not a power of two (exercises masking) and
``batch_size`` is deliberately not a multiple of 4 (exposes kernels that
process rows in groups and drop the tail).
"""

import torch
import torch.nn as nn

batch_size = 30
dim = 1000


class Model(nn.Module):
    """Softmax along dim 1."""

    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs() -> list[torch.Tensor]:
    """One CPU input; the harness moves it to the device."""
    return [torch.randn(batch_size, dim)]


def get_init_inputs() -> list:
    """``Model`` takes no constructor arguments."""
    return []
