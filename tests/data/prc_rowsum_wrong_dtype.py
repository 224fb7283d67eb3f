"""Defective row sum: correct values, but returned as float16 for float32 inputs (PRC-01)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.double().sum(dim=1).to(torch.float16)
