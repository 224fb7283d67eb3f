"""FORBID-01 dynamic: a forbidden module (``colorsys`` in the test's policy) imported by a
name built at run time, during the call."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        __import__("color" + "sys")
        values, order = torch.sort(x, dim=-1, descending=True, stable=True)
        return values[:, : self.k].contiguous(), order[:, : self.k].contiguous()
