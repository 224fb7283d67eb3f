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

import functools
from collections.abc import Callable
from enum import StrEnum

import torch

from kernelgate.inputs.cpu_stream import randperm_prefix

SPECIALS = {"nan": float("nan"), "+inf": float("inf"), "-inf": float("-inf")}


@functools.cache
def special_kinds(dtype: torch.dtype) -> tuple[str, ...]:
    """The kinds of ``SPECIALS`` that ``dtype`` can hold, in ``SPECIALS``'s order.

    Found by converting each and reading it back: float8_e4m3fn has NaN and no Inf (an Inf
    written into it becomes its largest finite value or NaN, depending on the device), the
    fnuz float8 dtypes and float8_e8m0fnu have only NaN, integer and bool dtypes have none.
    Injecting a kind the dtype lacks would inject some other value under that kind's name.
    """
    if not dtype.is_floating_point:
        return ()
    wanted = torch.tensor(list(SPECIALS.values()), dtype=torch.float64)
    held = wanted.to(dtype).to(torch.float64)
    return tuple(
        kind
        for kind, want, got in zip(SPECIALS, wanted.tolist(), held.tolist(), strict=True)
        if (want != want and got != got) or want == got
    )


def nonfinite(values: torch.Tensor) -> torch.Tensor:
    """Where a floating tensor holds NaN or Inf, for every floating dtype.

    torch has no ``isfinite`` (nor ``isinf``) for the float8 dtypes; each of their values is
    exact in float32, so they are read through it. A judge path that met an fp8 input with
    ``torch.isfinite`` would crash on exactly the kernels these dtypes are for.
    """
    if values.dtype.itemsize == 1 and values.is_floating_point():
        values = values.float()
    return ~torch.isfinite(values)


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
    the three for the scattered densities) injected at seeded positions.

    Only kinds the dtype can hold are injected (``special_kinds``): values of a dtype that
    has none of the kinds asked for come back unchanged, and "mixed" cycles through the
    kinds the dtype has."""
    out = values.clone(memory_format=torch.contiguous_format)
    available = special_kinds(out.dtype)
    kinds = [k for k in (list(SPECIALS) if kind == "mixed" else [kind]) if k in available]
    if out.numel() == 0 or not kinds:
        return out
    g = torch.Generator().manual_seed(seed)
    target, special = _writable(out)
    if density is Density.ONE_PER_TENSOR:
        position = int(torch.randint(out.numel(), (1,), generator=g))
        target.view(-1)[position] = special(kinds[0])
        return out
    if density is Density.ONE_PER_ROW:
        rows = target.view(-1, out.shape[-1]) if out.dim() >= 1 else target.view(1, 1)
        columns = torch.randint(rows.shape[1], (rows.shape[0],), generator=g)
        rows[torch.arange(rows.shape[0]), columns] = special(kinds[0])
        return out
    flat = target.view(-1)
    count = max(1, flat.numel() // 100)
    # The head of a seeded permutation of every position: distinct positions. Only the
    # head is built (``randperm_prefix``, the same values and generator state as
    # ``torch.randperm(numel)[:count]``): the whole permutation of a 67M-element input
    # took a second and 512 MiB per injection.
    positions = randperm_prefix(g, flat.numel(), count)
    # The i-th position gets kinds[i % len(kinds)]: one indexed fill per kind over the
    # positions of that residue. The positions are distinct (a permutation), so the order
    # of the writes cannot matter; the generator is not touched here, so the whole-row
    # draw below sees the same state as when this was a loop over the positions.
    for j, name in enumerate(kinds):
        flat[positions[j :: len(kinds)]] = special(name)
    if density is Density.WHOLE_ROW and out.dim() >= 1:
        rows = target.view(-1, out.shape[-1])
        row = int(torch.randint(rows.shape[0], (1,), generator=g))
        rows[row] = special(kinds[0])
    return out


def _writable(out: torch.Tensor) -> tuple[torch.Tensor, Callable[[str], float | int]]:
    """Where to write specials into the contiguous ``out``, and what to write for a kind.

    torch lacks indexed writes for some float8 dtypes (float8_e8m0fnu has no
    ``index_put``); for one-byte floats the kind's byte is written into ``out``'s bytes
    instead, the same bits the conversion of the value gives.
    """
    if out.element_size() != 1:
        return out, SPECIALS.__getitem__

    def byte(kind: str) -> int:
        value = torch.tensor([SPECIALS[kind]], dtype=torch.float64).to(out.dtype)
        return int(value.view(torch.uint8)[0])

    return out.view(torch.uint8), byte
