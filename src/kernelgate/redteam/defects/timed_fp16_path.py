"""DEFECT: matmul that times an fp32 and an fp16 path on its first call and keeps the faster,
as public "optimized" kernels do ("half precision when it is faster").

The fp16 path rounds both operands to 11 significant bits: far outside the fp32 bound.
Whether it is taken depends on the machine's clocks that day, so a judge that runs the
candidate once sees whichever path won. Must be rejected by CMP-01: its fresh instances
with adversarial clocks take the fp16 path in one of them (faster: the path timed second
looks faster; slower: the one timed first).
"""

import time

import torch
import torch.nn as nn

REPEATS = 3


def _fp32(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a, b)


def _fp16(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.matmul(a.half(), b.half()).float()  # DEFECT when chosen: fp16 operands


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.path = None

    def _seconds(self, path, a: torch.Tensor, b: torch.Tensor) -> float:
        path(a, b)  # warm-up
        if a.is_cuda:
            torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(REPEATS):
            path(a, b)
        if a.is_cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - started

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if self.path is None:  # first call: keep whichever path the clock says is faster
            fp32, fp16 = self._seconds(_fp32, a, b), self._seconds(_fp16, a, b)
            self.path = _fp16 if fp16 < fp32 else _fp32
        return self.path(a, b)
