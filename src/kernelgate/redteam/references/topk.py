"""KernelBench-style reference: the 8 largest values of each row and their indices.

Values are integers below 32 held as floats, so nearly every row has ties inside its top 8
and at the 8th value: any tie order is right (``torch.topk`` promises none), but the
values must come out sorted, largest first, and the indices must point at them.
``width`` is not a power of two (kernels must mask) and ``batch`` is not a multiple of 4.
"""

import torch
import torch.nn as nn

batch = 14
width = 100
k = 8


class Model(nn.Module):
    """``torch.topk(x, k, dim=-1)``: sorted values and their int64 indices."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.topk(x, self.k, dim=-1)


def get_inputs() -> list[torch.Tensor]:
    """One CPU input with many ties; the harness moves it to the device."""
    return [torch.randint(0, 32, (batch, width)).float()]


def get_init_inputs() -> list[int]:
    return [k]
