"""Honest paged gather that refuses a block table which is not a permutation (a kernel
that assumes each block belongs to one sequence)."""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, cache: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
        flat = block_table.reshape(-1).long()
        if not torch.equal(flat.sort().values, torch.arange(cache.shape[0])):
            raise ValueError(f"block table is not a permutation: {flat.tolist()}")
        pages = cache.index_select(0, flat).reshape(block_table.shape[0], -1, cache.shape[-1])
        return pages.sum(dim=1)
