"""Honest top-k that breaks ties the other way: it searches the row reversed."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, flipped = torch.topk(x.flip(-1), self.k, dim=-1)
        return values, x.shape[-1] - 1 - flipped
