"""Honest integer row sums, summed in another order."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, counts: torch.Tensor) -> torch.Tensor:
        return counts.flip(-1).cumsum(dim=-1)[..., -1]
