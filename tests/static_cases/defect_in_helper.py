"""STATIC-MONKEYPATCH, in a helper file of the candidate's own folder."""

import torch.nn as nn
from local_helper_patch import identity


class ModelNew(nn.Module):
    def forward(self, x):
        return identity(x)
