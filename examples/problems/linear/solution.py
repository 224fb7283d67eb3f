"""A solution: the same parameters as the reference (``proj.weight``, ``proj.bias``), the
product written with matmul; its weights arrive by ``load_state_dict(strict=True)``."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.proj = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addmm(self.proj.bias, x, self.proj.weight.t())
