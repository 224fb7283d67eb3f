"""Reference: a two-layer MLP, Linear(256 -> 4096) -> ReLU -> Linear(4096 -> 256), batch 1024.

Wide on purpose: its two GEMMs (4.3 GFLOP) are most of the time of any eager port of it, on
the CPU (aten, against the Triton interpreter) as on a device (cuBLAS), so a port that adds
one token kernel reads well under AUTH-01's half (the red team's ``fig_leaf_kernel``).
"""

import torch
import torch.nn as nn

batch_size = 1024
in_features = 256
hidden = 4096
out_features = 256


class Model(nn.Module):
    def __init__(self, in_features: int, hidden: int, out_features: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, in_features)]


def get_init_inputs() -> list:
    return [in_features, hidden, out_features]
