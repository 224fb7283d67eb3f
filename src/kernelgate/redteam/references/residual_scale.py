"""Reference: a residual branch scaled by 1e-3 (outputs far below allclose's atol of 1e-2).

KernelBench issue 165: a candidate returning zeros passes ``allclose(atol=1e-2)`` on
problems whose outputs are this small.
"""

import torch
import torch.nn as nn

n = 3000


class Model(nn.Module):
    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(n)]


def get_init_inputs() -> list:
    return [1e-3]
