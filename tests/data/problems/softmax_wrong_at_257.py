"""A softmax solution wrong at one declared shape only (dim 257: its last column is
dropped from the sum), right at the reference's own shape."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weights = torch.exp(x - x.amax(dim=-1, keepdim=True))
        if x.shape[-1] == 257:
            return weights / weights[:, :-1].sum(dim=-1, keepdim=True)
        return weights / weights.sum(dim=-1, keepdim=True)
