"""Reference: exact (erf) GELU of a (33, 129) matrix."""

import torch
import torch.nn as nn
import torch.nn.functional as F

rows = 33
cols = 129


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(rows, cols)]


def get_init_inputs() -> list:
    return []
