"""A softmax solution off by a relative 3e-4 everywhere: inside a 1e-3 tolerance, outside
1e-5 (the old check's yaml tolerance decides)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = torch.exp(x - x.amax(dim=-1, keepdim=True))
        return weights / weights.sum(dim=-1, keepdim=True) * (1 + 3e-4)
