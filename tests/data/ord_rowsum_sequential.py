"""Defective (lossy order) row sum: one fp32 running sum per row, one column at a time.

Every term is added to the whole partial sum, so once a large term sits in it, the small
ones are rounded away. ORD-01's cancellation rows make that exceed the order bound.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        acc = torch.zeros(x.shape[0], dtype=torch.float32, device=x.device)
        for k in range(x.shape[1]):
            acc = acc + x[:, k].float()
        return acc.to(x.dtype)
