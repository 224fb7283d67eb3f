"""EXC-02 test reference whose every output is a float32 subnormal: exp(x - 95).

exp(-95) is about 5.5e-42, far below float32's smallest normal (1.2e-38) and far above its
smallest subnormal (1.4e-45), so an exp that flushes subnormal results shows up as zeros.
"""

import torch
import torch.nn as nn

rows = 8
cols = 96


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x - 95.0)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(rows, cols)]


def get_init_inputs() -> list:
    return []
