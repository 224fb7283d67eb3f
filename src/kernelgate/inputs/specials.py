"""Injection of IEEE special values (NaN, +Inf, -Inf) at seeded positions and rows."""

from __future__ import annotations

import torch

SPECIALS = {"nan": float("nan"), "+inf": float("inf"), "-inf": float("-inf")}


def inject(values: torch.Tensor, kind: str, seed: int, *, whole_row: bool = False) -> torch.Tensor:
    """A copy of ``values`` with ``kind`` ("nan", "+inf", "-inf" or "mixed") injected.

    Scattered mode hits about 1% of the elements (at least one); whole-row mode fills one
    seeded row (a slice along the last dim) and scatters a few more elsewhere.
    """
    out = values.clone()
    if out.numel() == 0 or not out.is_floating_point():
        return out
    g = torch.Generator().manual_seed(seed)
    flat = out.view(-1)
    count = max(1, flat.numel() // 100)
    positions = torch.randperm(flat.numel(), generator=g)[:count]
    kinds = list(SPECIALS) if kind == "mixed" else [kind]
    # The i-th position gets kinds[i % len(kinds)]: one indexed fill per kind over the
    # positions of that residue. The positions are distinct (a permutation), so the order
    # of the writes cannot matter; the generator is not touched here, so the whole-row
    # draw below sees the same state as when this was a loop over the positions.
    for j, name in enumerate(kinds):
        flat[positions[j :: len(kinds)]] = SPECIALS[name]
    if whole_row and out.dim() >= 1:
        rows = out.reshape(-1, out.shape[-1])
        row = int(torch.randint(rows.shape[0], (1,), generator=g))
        rows[row] = SPECIALS[kinds[0]]
    return out
