"""cmp_ew_reference.py's SiLU, but the reference's own input is a transposed view.

For the rule that a fault at a layout the reference itself sends is a RES-01 failure, never
an unguarded precondition (tests/test_unguarded_precondition.py).
"""

import torch
import torch.nn as nn

rows = 4
cols = 256


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(cols, rows).t()]


def get_init_inputs() -> list:
    return []
