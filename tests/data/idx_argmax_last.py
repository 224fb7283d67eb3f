"""Honest argmax that returns the last maximum of each row, not the first."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.shape[1] - 1 - torch.argmax(x.flip(1), dim=1)
