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

* **completion**, asked only for the positions the refined probe leaves in dispute: a dense
  reference can also make a class through the *finite* entries a position does not depend
  on (a +inf in a query times a masked key whose sign decides between -inf, which the mask
  absorbs, and NaN, which it does not, where the mask is added rather than filled). Which
  rows of the inputs a position depends on is found on the case made finite, by moving one
  row at a time (both ways); the oracle then runs twice more with every row the position
  does not depend on replaced by a sign-extreme value (all positive, all negative), the rows
  it does depend on kept as the case has them, specials included. Each of those inputs
  agrees with the case on everything the position depends on, so its oracle value is as
  true as the case's own: a class that changes between them is not forced by the case, and
  the position is not judged.

All of them can only take positions out of judgement (EXC-01 treats their results as more
honest runs), never add a mismatch. The refined probe costs two oracle runs a unit plus one
a distinct dependence set, the completion two a row plus two a dependence set, so each has a
budget (units, and units times input elements); beyond it the verdict before it stands. The
completion finds dependence by finite moves, so a position whose dependence on a row no
move shows (a relu's dead side for both moves) counts that row as free: it can excuse such
a position, never condemn it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

from kernelgate.inputs.specials import nonfinite

Expected = Callable[[list[Any]], list[Any]]

# The refined probe's and the completion's budgets: units probed (two oracle runs each),
# units times input elements (what those runs read), and distinct dependence sets evaluated
# (one or two runs each). Causal attention at the examples' size (three inputs of 2 x 3 x 100
# x 32) has 1,800 rows of 32 and 57,600 elements an input set: about 10^8 element-runs.
MAX_UNITS = 4096
MAX_UNIT_ELEMENTS = 1 << 30
MAX_DEPENDENCE_SETS = 256
# Wall seconds one refined probe or completion may take. A run of the oracle costs a few
# milliseconds on the CPU but more on a device (float64 kernels, a synchronisation a unit),
# and a defect that fails a case everywhere disputes every unit: up to two runs for each of
# MAX_UNITS units, a verdict's slowest step if unbounded. Over the budget a probe excuses
# nothing, as over the unit budget. (The H200 calibration that first ran past 200 s on a
# causal attention defect was slow in CMP-03's confirmation shapes, not here; this bound
# is a guard, not that fix.)
MAX_PROBE_SECONDS = 30.0


def special_masks(values: Sequence[Any]) -> list[torch.Tensor | None]:
    """Per input, where it holds NaN or Inf (None for inputs that are not float tensors)."""
    return [
        nonfinite(v) if isinstance(v, torch.Tensor) and v.is_floating_point() else None
        for v in values
    ]


def has_specials(masks: Sequence[torch.Tensor | None]) -> bool:
    return any(mask is not None and bool(mask.any()) for mask in masks)


def equal_or_both_nan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise equality in which NaN equals NaN (and -0.0 equals +0.0)."""
    return (a == b) | (torch.isnan(a) & torch.isnan(b))


def _largest(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).max


def _is_float8(value: Any) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point() and value.itemsize == 1


def _carried(
    values: Sequence[Any], expected: Expected
) -> tuple[list[Any], Expected, list[torch.dtype | None]]:
    """The probes' inputs with float8 tensors carried in float32, the oracle behind a
    wrapper that narrows them back, and every input's own dtype.

    torch has no ``masked_fill``, ``where`` or arithmetic for the float8 dtypes, and float32
    holds each of their values exactly, so the probes edit float32 copies; the oracle still
    sees the candidate's dtypes. A finite value an edit pushes past the dtype's range (|x| +
    1 at 448 for e4m3fn) is clamped to its largest finite value, since the conversion would
    make it NaN, not an edit of the same sign."""
    dtypes = [v.dtype if isinstance(v, torch.Tensor) else None for v in values]
    narrow = [_is_float8(v) for v in values]
    if not any(narrow):
        return list(values), expected, dtypes

    def back(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        big = _largest(dtype)
        return torch.where(value.isfinite(), value.clamp(-big, big), value).to(dtype)

    def narrowed(inputs: list[Any]) -> list[Any]:
        return expected(
            [back(v, d) if n and d is not None else v for v, d, n in zip(inputs, dtypes, narrow)]
        )

    return [v.float() if n else v for v, n in zip(values, narrow)], narrowed, dtypes


def coarse_probe(values: list[Any], expected: Expected, oracle: list[Any]) -> list[Any]:
    """The oracle's outputs with every position that depends on no special given its
    value with the specials made finite (the largest finite value's run)."""
    values, expected, dtypes = _carried(values, expected)
    masks = special_masks(values)

    def substituted(pick: Callable[[torch.dtype], float]) -> list[Any]:
        return expected(
            [
                v if m is None or d is None else v.masked_fill(m, pick(d))
                for v, m, d in zip(values, masks, dtypes)
            ]
        )

    largest = substituted(_largest)
    others = [substituted(lambda dtype: -_largest(dtype)), substituted(lambda dtype: 0.0)]
    outputs = []
    for k, want in enumerate(oracle):
        if not isinstance(want, torch.Tensor) or not want.is_floating_point():
            outputs.append(want)
            continue
        # on the device of ``oracle``'s output, where the judge keeps it (the oracle's
        # device, or the host: ``GateContext._kept``); the probe's runs are moved there
        same = torch.ones(want.shape, dtype=torch.bool, device=want.device)
        for other in others:
            same &= equal_or_both_nan(largest[k].to(want.device), other[k].to(want.device))
        outputs.append(torch.where(same, largest[k].to(want.device), want))
    return outputs


def _elements(values: Sequence[Any]) -> int:
    return sum(v.numel() for v in values if isinstance(v, torch.Tensor))


def _units(
    masks: Sequence[torch.Tensor | None], elements: int = 0
) -> list[tuple[int, torch.Tensor]] | None:
    """The specials as (input, mask) units: one a special while there are at most
    ``MAX_UNITS``, else one a row of an input's last dimension (a token's vector: its
    specials reach the same outputs), else None (over budget, in units or in ``elements``
    read a run)."""
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
        if len(units) <= MAX_UNITS and len(units) * elements <= MAX_UNIT_ELEMENTS:
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
    case has more units or dependence sets than the budget allows, or when the runs take
    longer than ``MAX_PROBE_SECONDS``."""
    values, expected, dtypes = _carried(values, expected)
    masks = special_masks(values)
    units = _units(masks, _elements(values))
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

    deadline = time.monotonic() + MAX_PROBE_SECONDS
    base = with_units({})
    depends = torch.zeros((len(positions), len(units)), dtype=torch.bool)
    for u, (i, _) in enumerate(units):
        if time.monotonic() > deadline:
            return None
        big = _largest(dtypes[i] or values[i].dtype)
        for extreme in (big, -big):
            depends[:, u] |= ~equal_or_both_nan(with_units({u: extreme}), base).cpu()
    groups: dict[tuple[int, ...], list[int]] = {}
    for p, row in enumerate(depends):
        groups.setdefault(tuple(torch.nonzero(row).flatten().tolist()), []).append(p)
    if len(groups) > MAX_DEPENDENCE_SETS:
        return None
    refined = fallback.clone().reshape(-1)
    for kept, members in groups.items():
        if time.monotonic() > deadline:
            return None
        at = torch.tensor(members)
        values_at = with_units(dict.fromkeys(kept))
        values_at = values_at[at.to(values_at.device)]
        refined[positions[at].to(refined.device)] = values_at.to(refined.device, refined.dtype)
    return refined.reshape(fallback.shape)


def _rows(values: Sequence[Any]) -> list[tuple[int, int]] | None:
    """Every row of every floating-point input's last dimension as (input, row), or None
    when there are more than the completion's budget allows."""
    rows = []
    for i, value in enumerate(values):
        if isinstance(value, torch.Tensor) and value.is_floating_point() and value.dim():
            rows.extend((i, r) for r in range(value.numel() // max(value.shape[-1], 1)))
    if len(rows) > MAX_UNITS or 2 * len(rows) * _elements(values) > MAX_UNIT_ELEMENTS:
        return None
    return rows


def completion_probe(
    values: list[Any],
    expected: Expected,
    output_index: int,
    disputed: torch.Tensor,
    fallback: torch.Tensor,
) -> list[torch.Tensor] | None:
    """Output ``output_index`` twice, each ``disputed`` position given the oracle's value on
    the case with every input row the position does not depend on replaced by a positive,
    then a negative, finite value (``fallback`` elsewhere); None over budget (units, sets or
    ``MAX_PROBE_SECONDS``)."""
    values, expected, _ = _carried(values, expected)
    rows = _rows(values)
    if not rows:
        return None
    positions = torch.nonzero(disputed.reshape(-1).cpu()).flatten()
    masks = special_masks(values)
    finite = [v if m is None else v.masked_fill(m, 0.0) for v, m in zip(values, masks)]

    def at_positions(inputs: list[Any]) -> torch.Tensor:
        out = expected(inputs)[output_index]
        return out.reshape(-1)[positions.to(out.device)]

    def moved(i: int, r: int, sign: float) -> list[Any]:
        out = list(finite)
        flat = finite[i].reshape(-1, finite[i].shape[-1]).clone()
        flat[r] = flat[r] + sign * (flat[r].abs() + 1.0)
        out[i] = flat.reshape(finite[i].shape)
        return out

    deadline = time.monotonic() + MAX_PROBE_SECONDS
    base = at_positions(finite)
    depends = torch.zeros((len(positions), len(rows)), dtype=torch.bool)
    for u, (i, r) in enumerate(rows):
        if time.monotonic() > deadline:
            return None
        for sign in (1.0, -1.0):
            depends[:, u] |= ~equal_or_both_nan(at_positions(moved(i, r, sign)), base).cpu()
    groups: dict[tuple[int, ...], list[int]] = {}
    for p, row in enumerate(depends):
        groups.setdefault(tuple(torch.nonzero(row).flatten().tolist()), []).append(p)
    if len(groups) > MAX_DEPENDENCE_SETS:
        return None

    def completed(kept: set[int], sign: float) -> list[Any]:
        """The case with every row outside ``kept`` made sign * (|finite value| + 1)."""
        out = []
        for i, value in enumerate(values):
            if not (isinstance(value, torch.Tensor) and value.is_floating_point() and value.dim()):
                out.append(value)
                continue
            width = value.shape[-1]
            free = torch.ones(value.numel() // max(width, 1), dtype=torch.bool)
            free[[r for u, (j, r) in enumerate(rows) if j == i and u in kept]] = False
            free = free.to(value.device).unsqueeze(-1)
            extreme = sign * (finite[i].reshape(-1, width).abs() + 1.0)
            out.append(torch.where(free, extreme, value.reshape(-1, width)).reshape(value.shape))
        return out

    alternatives = []
    for sign in (1.0, -1.0):
        alternative = fallback.clone().reshape(-1)
        for kept, members in groups.items():
            if time.monotonic() > deadline:
                return None
            at = torch.tensor(members)
            values_at = at_positions(completed(set(kept), sign))
            values_at = values_at[at.to(values_at.device)]
            alternative[positions[at].to(alternative.device)] = values_at.to(
                alternative.device, alternative.dtype
            )
        alternatives.append(alternative.reshape(fallback.shape))
    return alternatives
