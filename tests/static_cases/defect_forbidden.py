"""FORBID-01: uses torch.topk (forbidden by the test's policy) under an alias."""

import torch.nn as nn
from torch import topk as pick


class ModelNew(nn.Module):
    def forward(self, x):
        return pick(x, 2).values
