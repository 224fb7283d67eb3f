"""Defect (CMP-03): in_features hard-coded to 24, the reference's value. Right there (same
seeded weights), raises at any other in_features: a clean refusal outside a narrowed domain."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(24, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))
