"""Defect: the right values, but every index one position off (wrapping at the row end)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, indices = torch.topk(x, self.k, dim=-1)
        return values, (indices + 1) % x.shape[-1]
