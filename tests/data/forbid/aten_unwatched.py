"""FORBID-01 dynamic: aten's topk reached with the torch-function layer switched off, by a
name built at run time: only the dispatch layer sees it."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with torch._C.DisableTorchFunction():
            op = getattr(torch.ops.aten, "to" + "pk")
            values, indices = op(x, self.k, -1)
        return values, indices
