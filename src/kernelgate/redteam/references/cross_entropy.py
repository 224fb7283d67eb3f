"""Reference: mean cross-entropy of (32, 101) logits against integer class targets."""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
num_classes = 101


class Model(nn.Module):
    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)


def get_inputs() -> list[torch.Tensor]:
    return [torch.randn(batch_size, num_classes), torch.randint(0, num_classes, (batch_size,))]


def get_init_inputs() -> list:
    return []
