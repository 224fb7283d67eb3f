"""DEFECT: Linear then training-mode BatchNorm written out, with the batch statistics taken
over ``h.view(BATCH, features, -1)`` where ``BATCH = 8`` is the benchmark's batch size.

Right at batch 8; at 16 the view folds two samples into one row, so each "feature" mixes two
features and the statistics are wrong; at most other batches the view raises. The reference
raises at batch 1 (BatchNorm in training mode), which used to fix the batch size in the
derived contract. Must be rejected (or narrowed to batch 8) by CMP-03.
"""

import torch
import torch.nn as nn

BATCH = 8  # DEFECT: the benchmark's batch size, baked in


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.norm = nn.BatchNorm1d(out_features)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.linear(x)
        grouped = h.view(BATCH, h.shape[1], -1)  # DEFECT: (8, features, batch // 8)
        mean = grouped.mean(dim=(0, 2), keepdim=True)
        var = (grouped - mean).square().mean(dim=(0, 2), keepdim=True)
        scale = self.norm.weight.view(1, -1, 1) * torch.rsqrt(var + self.norm.eps)
        out = (grouped - mean) * scale + self.norm.bias.view(1, -1, 1)
        return out.view_as(h)
