"""Injection of IEEE special values (NaN, +Inf, -Inf) at seeded positions and rows.

Two densities, because they answer different questions:

- **scattered** (about 1% of the elements, or whole rows): many specials at once, so every
  code path meets one. But a row that reaches a dot product or a reduction then holds
  several infinities of both signs, and ``inf - inf`` makes the oracle's answer NaN too: a
  kernel that turns an Inf into NaN is never seen doing it.
- **sparse** (exactly one special per tensor, or exactly one per row): a single Inf that
  travels through a linear layer comes out as a row of +-Inf without NaN, so what happens
  to an Inf downstream (a log-sum-exp whose max is +Inf) is judged as Inf.
"""

from __future__ import annotations

from enum import StrEnum

import torch

SPECIALS = {"nan": float("nan"), "+inf": float("inf"), "-inf": float("-inf")}


class Density(StrEnum):
    """How many specials a trial injects into each floating input."""

    SCATTERED = "scattered"  # about 1% of the elements
    WHOLE_ROW = "whole-row"  # scattered, plus one seeded row filled entirely
    ONE_PER_TENSOR = "one-per-tensor"  # exactly one element of the tensor
    ONE_PER_ROW = "one-per-row"  # exactly one element of every row (slice along the last dim)


def inject(
    values: torch.Tensor, kind: str, seed: int, density: Density = Density.SCATTERED
) -> torch.Tensor:
    """A copy of ``values`` with ``kind`` ("nan", "+inf", "-inf"; "mixed" cycles through
    the three for the scattered densities) injected at seeded positions."""
    out = values.clone(memory_format=torch.contiguous_format)
    if out.numel() == 0 or not out.is_floating_point():
        return out
    g = torch.Generator().manual_seed(seed)
    kinds = list(SPECIALS) if kind == "mixed" else [kind]
    if density is Density.ONE_PER_TENSOR:
        position = int(torch.randint(out.numel(), (1,), generator=g))
        out.view(-1)[position] = SPECIALS[kinds[0]]
        return out
    if density is Density.ONE_PER_ROW:
        rows = out.view(-1, out.shape[-1]) if out.dim() >= 1 else out.view(1, 1)
        columns = torch.randint(rows.shape[1], (rows.shape[0],), generator=g)
        rows[torch.arange(rows.shape[0]), columns] = SPECIALS[kinds[0]]
        return out
    flat = out.view(-1)
    count = max(1, flat.numel() // 100)
    positions = torch.randperm(flat.numel(), generator=g)[:count]
    # The i-th position gets kinds[i % len(kinds)]: one indexed fill per kind over the
    # positions of that residue. The positions are distinct (a permutation), so the order
    # of the writes cannot matter; the generator is not touched here, so the whole-row
    # draw below sees the same state as when this was a loop over the positions.
    for j, name in enumerate(kinds):
        flat[positions[j :: len(kinds)]] = SPECIALS[name]
    if density is Density.WHOLE_ROW and out.dim() >= 1:
        rows = out.reshape(-1, out.shape[-1])
        row = int(torch.randint(rows.shape[0], (1,), generator=g))
        rows[row] = SPECIALS[kinds[0]]
    return out
