"""Reference: a linear layer into a row-wise log-sum-exp (8 rows, 2048 -> 48 features).

A Gemm-then-LogSumExp chain as KernelBench's level-2 problems have it. With 2048 inputs per
row, about 1% of scattered specials puts ~20 infinities in every row, which reach each
output feature with both signs of the weights: the oracle's row is NaN and what a kernel
does with a single +Inf (the log-sum-exp's max) is never seen. Exactly one special per row
keeps each feature at +-Inf instead.
"""

import torch
import torch.nn as nn

batch_size = 8
in_features = 2048
out_features = 48


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.logsumexp(self.linear(x), dim=1, keepdim=True)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, in_features)]


def get_init_inputs() -> list:
    return [in_features, out_features]
