"""Reference: ``relu(a) * b + c`` over three (33, 129) matrices (a fused activation, scale and
shift). ``torch.relu`` leaves the sign of ``relu(-0.0)`` to the backend (-0.0 on the CPU,
+0.0 on CUDA), and that sign reaches the output through the product whenever ``c`` is -0.0.
"""

import torch
import torch.nn as nn

rows = 33
cols = 129


class Model(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.relu(a) * b + c


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(rows, cols), torch.randn(rows, cols), torch.randn(rows, cols)]


def get_init_inputs() -> list:
    return []
