"""Reference: a two-layer MLP, Linear(8 -> hidden) -> ReLU -> Linear(hidden -> 6), hidden = 16.

``hidden`` shapes only the parameters (no input or output axis), so before issue 17 the
derived contract dropped it as a hyperparameter and no held-out shape moved it; it is now a
dim, varied by rebuilding both models at other hidden widths.
"""

import torch
import torch.nn as nn

batch_size = 4
in_features = 8
hidden = 16
out_features = 6


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
