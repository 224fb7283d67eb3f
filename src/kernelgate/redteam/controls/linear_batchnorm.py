"""Control: Linear then training-mode BatchNorm written out: per-feature batch mean and
biased variance of ``h.view(h.shape[0], features, -1)``, normalised and scaled."""

import torch
import torch.nn as nn


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
        grouped = h.view(h.shape[0], h.shape[1], -1)  # (batch, features, 1)
        mean = grouped.mean(dim=(0, 2), keepdim=True)
        var = (grouped - mean).square().mean(dim=(0, 2), keepdim=True)
        scale = self.norm.weight.view(1, -1, 1) * torch.rsqrt(var + self.norm.eps)
        out = (grouped - mean) * scale + self.norm.bias.view(1, -1, 1)
        return out.view_as(h)
