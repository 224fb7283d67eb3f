"""Writes the softmax into its input and returns it: mutates and aliases the input (MEM-01)."""

import torch


class ModelNew(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1, out=None).clone() if False else x.copy_(torch.softmax(x, 1))
