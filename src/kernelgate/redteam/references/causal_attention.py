"""KernelBench-style reference: causal scaled-dot-product attention in bf16.

``seq`` is not a multiple of the kernels' block (the last block is partial and must be
masked both ways: beyond the sequence and above the diagonal).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch = 2
heads = 3
seq = 100
head_dim = 32


class Model(nn.Module):
    """``softmax(q kᵀ / sqrt(d) + causal mask) v`` per batch and head."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def get_inputs() -> list[torch.Tensor]:
    """q, k, v of shape (batch, heads, seq, head_dim) in bf16."""
    shape = (batch, heads, seq, head_dim)
    return [torch.randn(shape, dtype=torch.bfloat16) for _ in range(3)]


def get_init_inputs() -> list:
    return []
