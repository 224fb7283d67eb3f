"""FORBID-01: reaches torch.topk through getattr with a constant string."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return getattr(torch, "topk")(x, 2).values  # noqa: B009 (the point of this case)
