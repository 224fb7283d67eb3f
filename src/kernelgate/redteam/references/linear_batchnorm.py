"""Reference: Linear (12 -> 16) then BatchNorm1d in training mode (batch statistics, as
KernelBench runs it) over a batch of 8.

BatchNorm over a (batch, features) input raises at batch 1 ("Expected more than 1 value per
channel when training"), so the derived contract's batch size has ``min = 2``: before issue
17 that one failing probe fixed the batch size, and no held-out shape moved it.
"""

import torch
import torch.nn as nn

batch_size = 8
in_features = 12
out_features = 16


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.norm = nn.BatchNorm1d(out_features)
        with torch.no_grad():  # non-trivial affine parameters
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(self.linear(x))


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, in_features)]


def get_init_inputs() -> list:
    return [in_features, out_features]
