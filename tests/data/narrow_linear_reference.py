"""Reference whose get_init_inputs depends on its sizes: CMP-03 must rebuild both models."""

import torch
import torch.nn as nn

batch = 3
in_features = 24
out_features = 16


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch, in_features)]


def get_init_inputs() -> list:
    return [in_features, out_features]
