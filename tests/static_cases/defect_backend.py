"""STATIC-BACKEND: turns on cudnn.benchmark and never turns it off."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        torch.backends.cudnn.benchmark = True
        return x * 2
