"""KernelBench-style reference: a linear layer with int4 weights and fp16 activations.

The weight is packed two 4-bit values a byte (``uint8``, shape ``(out, in // 2)``): the
low nibble holds the even input column, the high nibble the odd one, both stored with an
offset of 8 (so 0..15 means -8..7). Each run of ``group`` input columns of a row shares one
fp16 scale. The reference dequantizes in the activations' dtype and multiplies; the judge's
float64 oracle runs the same code on exact copies of the inputs.
``m`` is not a multiple of the kernels' row block and ``k`` spans several groups.
"""

import torch
import torch.nn as nn

m = 13
k = 256
n = 96
group = 64


class Model(nn.Module):
    """``x @ dequantize(packed, scales).T``."""

    def __init__(self, group_size: int) -> None:
        super().__init__()
        self.group_size = group_size

    def forward(self, x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        low = (packed & 0xF).to(x.dtype) - 8
        high = (packed >> 4).to(x.dtype) - 8
        weight = torch.stack([low, high], dim=-1).reshape(packed.shape[0], -1)
        weight = weight * scales.to(x.dtype).repeat_interleave(self.group_size, dim=1)
        return x @ weight.T


def get_inputs() -> list[torch.Tensor]:
    """Activations, packed int4 weights (every byte value) and positive group scales."""
    x = torch.randn(m, k, dtype=torch.float16)
    packed = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8)
    scales = (torch.rand(n, k // group) * 0.02 + 0.005).to(torch.float16)
    return [x, packed, scales]


def get_init_inputs() -> list[int]:
    return [group]
