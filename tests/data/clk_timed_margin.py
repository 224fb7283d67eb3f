"""Test candidate (clocks): elementwise add that times an exact fp32 path and an fp16 path
on its first call and keeps the faster.

The fp16 path is made 20 times as much work, so with real clocks it never wins and the
main instance verifies; in CMP-01's ``faster`` instance the path timed second looks
faster, and its fp16 answer fails the elementwise bound.
"""

import time

import torch
import torch.nn as nn


def _exact(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


def _half(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    for _ in range(20):
        out = (a.half() + b.half()).float()
    return out


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.path = None

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if self.path is None:
            _exact(a, b), _half(a, b)  # warm-up
            started = time.perf_counter()
            _exact(a, b)
            exact = time.perf_counter() - started
            started = time.perf_counter()
            _half(a, b)
            half = time.perf_counter() - started
            self.path = _half if half < exact else _exact
        return self.path(a, b)
