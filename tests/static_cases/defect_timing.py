"""STATIC-TIMING: picks the code path from a clock reading."""

import time

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        started = time.perf_counter()
        y = x * 2
        elapsed = time.perf_counter() - started
        if elapsed > 1e-3:
            return y
        return x + x
