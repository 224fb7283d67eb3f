"""Defect for a stable sort: ties come out in descending index order (sorted values right)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        values, flipped = torch.sort(x.flip(-1), dim=-1, stable=True)
        return values, x.shape[-1] - 1 - flipped
