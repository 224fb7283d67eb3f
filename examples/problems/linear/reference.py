"""A linear layer: ``nn.Linear(in_features, out_features)`` on a (batch, in_features)
input. Its weights are the problem's: a solution receives them by ``load_state_dict``."""

import torch
import torch.nn as nn

batch = 16
in_features = 64
out_features = 48


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int) -> None:
        super().__init__()
        self.proj = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch, in_features)]


def get_init_inputs() -> list[int]:
    return [in_features, out_features]
