"""Defect: the first row's sum is one too large."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, counts: torch.Tensor) -> torch.Tensor:
        sums = counts.sum(dim=-1)
        sums[0] += 1
        return sums
