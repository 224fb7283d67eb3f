"""Paged gather: a block table that is a permutation of the cache's blocks."""

import torch
import torch.nn as nn

seqs = 4
blocks_per_seq = 6
block_size = 8
head_dim = 16


class Model(nn.Module):
    def forward(self, cache: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
        pages = cache[block_table.long()]  # (seqs, blocks_per_seq, block_size, head_dim)
        return pages.reshape(block_table.shape[0], -1, cache.shape[-1]).sum(dim=1)


def get_inputs() -> list[torch.Tensor]:
    cache = torch.randn(seqs * blocks_per_seq, block_size, head_dim)
    table = torch.randperm(seqs * blocks_per_seq).reshape(seqs, blocks_per_seq).to(torch.int32)
    return [cache, table]


def get_init_inputs() -> list[int]:
    return []
