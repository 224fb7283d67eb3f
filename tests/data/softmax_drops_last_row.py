"""Defect (CMP-01 structure): returns one row fewer than the reference (a pure PyTorch
candidate, so the structure finding costs no interpreter time)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x[:-1], dim=-1)
