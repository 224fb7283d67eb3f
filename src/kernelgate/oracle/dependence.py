"""Which injected specials an output position depends on (EXC-01's dependence probe).

A reference that computes densely makes NaN where IEEE arithmetic multiplies a masked
weight by a NaN (``0 x NaN``: causal attention's probabilities above the diagonal times a
NaN in v), although the true result there does not depend on that input. An implementation
that never reads the masked entries is as faithful as the reference and gives a finite
value, so EXC-01 must not demand the reference's NaN there.

Dependence is found the way a person would check it, by substitution in the float64
oracle:

* **coarse**: every special replaced by the dtype's largest finite value, its negative and
  zero; a position whose three results are equal depends on no special at all.
* **refined**, asked only for the positions the coarse probe leaves in dispute: the
  specials are taken one by one (or, past a budget, one row of an input at a time: a
  key's or a query's vector), each unit alone is made ±max with every other special zero, and a
  position depends on the units that change it. The position's expected value is then the
  oracle's with only the units it depends on kept as specials. This separates a row that
  sees a special in a visible key (it depends on it and keeps its class) from a NaN in a
  masked one (it does not).

Both can only take positions out of judgement (EXC-01 treats the result as one more honest
run), never add a mismatch. The refined probe costs two oracle runs a unit plus one a
distinct dependence set, so it has a budget; beyond it the coarse verdict stands.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

Expected = Callable[[list[Any]], list[Any]]

# The refined probe's budget: units probed (two oracle runs each) and distinct dependence
# sets evaluated (one run each). Causal attention at the examples' size has ~500 units.
MAX_UNITS = 1024
MAX_DEPENDENCE_SETS = 256


def special_masks(values: Sequence[Any]) -> list[torch.Tensor | None]:
    """Per input, where it holds NaN or Inf (None for inputs that are not float tensors)."""
    return [
        ~torch.isfinite(v) if isinstance(v, torch.Tensor) and v.is_floating_point() else None
        for v in values
    ]


def has_specials(masks: Sequence[torch.Tensor | None]) -> bool:
    return any(mask is not None and bool(mask.any()) for mask in masks)


def equal_or_both_nan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise equality in which NaN equals NaN (and -0.0 equals +0.0)."""
    return (a == b) | (torch.isnan(a) & torch.isnan(b))


def _largest(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).max


def coarse_probe(values: list[Any], expected: Expected, oracle: list[Any]) -> list[Any]:
    """The oracle's outputs with every position that depends on no special given its
    value with the specials made finite (the largest finite value's run)."""
    masks = special_masks(values)

    def substituted(pick: Callable[[torch.dtype], float]) -> list[Any]:
        return expected(
            [v if m is None else v.masked_fill(m, pick(v.dtype)) for v, m in zip(values, masks)]
        )

    largest = substituted(_largest)
    others = [substituted(lambda dtype: -_largest(dtype)), substituted(lambda dtype: 0.0)]
    outputs = []
    for k, want in enumerate(oracle):
        if not isinstance(want, torch.Tensor) or not want.is_floating_point():
            outputs.append(want)
            continue
        same = torch.ones(want.shape, dtype=torch.bool, device=want.device)
        for other in others:
            same &= equal_or_both_nan(largest[k], other[k])
        outputs.append(torch.where(same, largest[k], want))
    return outputs


def _units(masks: Sequence[torch.Tensor | None]) -> list[tuple[int, torch.Tensor]] | None:
    """The specials as (input, mask) units: one a special while there are at most
    ``MAX_UNITS``, else one a row of an input's last dimension (a token's vector: its
    specials reach the same outputs), else None (over budget)."""
    flagged = [(i, m) for i, m in enumerate(masks) if m is not None and bool(m.any())]
    for by_row in (False, True):
        units = []
        for i, mask in flagged:
            rows = mask.reshape(-1, mask.shape[-1] if by_row and mask.dim() else 1)
            for row in torch.nonzero(rows.any(dim=1)).flatten().tolist():
                unit = torch.zeros_like(rows)
                unit[row] = rows[row]
                units.append((i, unit.reshape(mask.shape)))
                if len(units) > MAX_UNITS:
                    break
        if len(units) <= MAX_UNITS:
            return units
    return None


def refined_probe(
    values: list[Any],
    expected: Expected,
    output_index: int,
    disputed: torch.Tensor,
    fallback: torch.Tensor,
) -> torch.Tensor | None:
    """Output ``output_index`` with each ``disputed`` position given the oracle's value
    with only the specials it depends on kept (``fallback`` elsewhere), or None when the
    case has more units or dependence sets than the budget allows."""
    masks = special_masks(values)
    units = _units(masks)
    if not units:
        return None
    positions = torch.nonzero(disputed.reshape(-1).cpu()).flatten()

    def with_units(kept: dict[int, float | None]) -> torch.Tensor:
        """The disputed positions of the output with unit u's specials set to kept[u] (None:
        as injected) and every other special zero."""
        filled = []
        for i, (value, mask) in enumerate(zip(values, masks)):
            if mask is None:
                filled.append(value)
                continue
            out = value.masked_fill(mask, 0.0)
            for u, how in kept.items():
                j, unit = units[u]
                if j == i:
                    out = torch.where(unit, value if how is None else how, out)
            filled.append(out)
        result = expected(filled)[output_index]
        return result.reshape(-1)[positions.to(result.device)]

    base = with_units({})
    depends = torch.zeros((len(positions), len(units)), dtype=torch.bool)
    for u, (i, _) in enumerate(units):
        big = _largest(values[i].dtype)
        for extreme in (big, -big):
            depends[:, u] |= ~equal_or_both_nan(with_units({u: extreme}), base).cpu()
    groups: dict[tuple[int, ...], list[int]] = {}
    for p, row in enumerate(depends):
        groups.setdefault(tuple(torch.nonzero(row).flatten().tolist()), []).append(p)
    if len(groups) > MAX_DEPENDENCE_SETS:
        return None
    refined = fallback.clone().reshape(-1)
    for kept, members in groups.items():
        at = torch.tensor(members)
        values_at = with_units(dict.fromkeys(kept))[at.to(fallback.device)]
        refined[positions[at].to(refined.device)] = values_at.to(refined.dtype)
    return refined.reshape(fallback.shape)
