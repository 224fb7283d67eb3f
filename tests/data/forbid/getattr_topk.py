"""FORBID-01 dynamic: torch.topk under a name built at run time (the static half cannot
resolve it)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pick = getattr(torch, "to" + "pk")
        return pick(x, self.k, dim=-1)
