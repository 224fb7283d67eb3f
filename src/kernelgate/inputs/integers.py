"""Value domains of integer, bool and packed inputs: derived from the reference, drawn in it.

An integer input is rarely "any integer": it indexes a table (an embedding, another input's
axis), is a permutation (a page table), a sorted list (offsets, expert ids), two int4
nibbles in a uint8, or a mask. Arbitrary bits would send a correct kernel out of bounds
and judge it on inputs its problem never has. So the domain is read off the reference's
own seeded ``get_inputs()`` (``derive_domain``: two draws, seeds 42 and 43), recorded in the
contract (``IntegerDomain``), and every case draws inside it (``draw_in_domain``), keeping
its structure. A bound is never claimed past the values seen: ``[min, max]`` are values of
the draws, so every drawn value is one the reference itself could have made.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from kernelgate.contract.spec import Dim, IntegerDomain, IntegerStructure

# A structure is claimed only where chance would rarely give it: uniqueness where a draw
# with replacement would expect at least this many repeats, sortedness on rows this long.
CHANCE_REPEATS = 3.0
SORTED_MIN_ROW = 3
# Sampling without replacement holds a permutation of the whole range; above this many
# values it samples by rejection instead.
PERMUTATION_LIMIT = 1 << 24


def _expected_repeats(count: int, span: int) -> float:
    """Pairs expected to collide among ``count`` values drawn with replacement from
    ``span`` values (the birthday count)."""
    return count * (count - 1) / 2 / max(span, 1)


def _unique(sample: torch.Tensor) -> bool:
    return sample.numel() >= 2 and torch.unique(sample).numel() == sample.numel()


def _unique_rows(sample: torch.Tensor) -> bool:
    if sample.dim() < 2 or sample.shape[-1] < 2:
        return False
    rows = sample.reshape(-1, sample.shape[-1]).sort(dim=-1).values
    return bool((rows[:, 1:] != rows[:, :-1]).all())


def _sorted_rows(sample: torch.Tensor) -> bool:
    if sample.dim() < 1 or sample.shape[-1] < SORTED_MIN_ROW:
        return False
    rows = sample.reshape(-1, sample.shape[-1]).to(torch.int64)
    ascending = bool((rows[:, 1:] >= rows[:, :-1]).all())
    return ascending and bool((rows[:, 1:] != rows[:, :-1]).any())


def _spans(sample: torch.Tensor, low: int, high: int) -> bool:
    """Every row along the last dim starts at ``low`` and ends at ``high`` (offsets such as
    cu_seqlens: 0 first, the total last)."""
    rows = sample.reshape(-1, sample.shape[-1])
    return bool((rows[:, 0] == low).all()) and bool((rows[:, -1] == high).all())


def derive_domain(
    samples: Sequence[torch.Tensor],
    others: dict[str, tuple[int, ...]],
    dims: Sequence[Dim] = (),
) -> IntegerDomain | None:
    """The domain the draws ``samples`` of one integer or bool input show (None: empty).

    ``others`` holds the other tensor inputs' shapes by name, ``dims`` the contract's dims:
    when the values start at 0 or above and their largest is one less than such a size,
    they index it (``index_into``). A structure is recorded only when every sample has it
    and chance would rarely make it (``CHANCE_REPEATS``, ``SORTED_MIN_ROW``).
    """
    samples = [s.detach().cpu() for s in samples if s.numel() > 0]
    if not samples:
        return None
    wide = [s.to(torch.int64) for s in samples]
    low = min(int(s.min()) for s in wide)
    high = max(int(s.max()) for s in wide)
    span = high - low + 1
    structure: list[IntegerStructure] = []
    if len(samples) > 1 and all(torch.equal(samples[0], s) for s in samples[1:]):
        structure.append(IntegerStructure.FIXED)
    else:
        numel, row = samples[0].numel(), samples[0].shape[-1] if samples[0].dim() else 1
        if _expected_repeats(numel, span) >= CHANCE_REPEATS and all(map(_unique, wide)):
            structure.append(IntegerStructure.UNIQUE)
        elif _expected_repeats(row, span) >= CHANCE_REPEATS and all(map(_unique_rows, wide)):
            structure.append(IntegerStructure.UNIQUE_ROWS)
        if all(map(_sorted_rows, wide)):
            structure.append(IntegerStructure.SORTED)
            if all(_spans(s, low, high) for s in wide):
                structure.append(IntegerStructure.SPANS)
    index_into = None
    if low >= 0 and samples[0].dtype != torch.bool:
        axes = [
            f"{name}.shape[{axis}]"
            for name, shape in others.items()
            for axis, size in enumerate(shape)
            if size == high + 1
        ]
        named = [dim.name for dim in dims if dim.reference == high + 1]
        index_into = next(iter(axes + named), None)
    return IntegerDomain(low, high, structure, index_into)


def index_bound(
    domain: IntegerDomain, shapes: dict[str, tuple[int, ...]], sizes: dict[str, int]
) -> int | None:
    """The exclusive upper bound ``domain.index_into`` names at a case's shapes and sizes
    (None: it names nothing there)."""
    target = domain.index_into
    if target is None:
        return None
    if target in sizes:
        return sizes[target]
    name, _, rest = target.partition(".shape[")
    if rest.endswith("]") and name in shapes:
        axis = int(rest[:-1])
        shape = shapes[name]
        return shape[axis] if -len(shape) <= axis < len(shape) else None
    return None


def _sample_without_replacement(
    g: torch.Generator, count: int, low: int, span: int
) -> torch.Tensor:
    """``count`` distinct values of ``[low, low + span)`` in random order."""
    if span <= PERMUTATION_LIMIT:
        return torch.randperm(span, generator=g)[:count] + low
    chosen = torch.empty(0, dtype=torch.int64)
    while chosen.numel() < count:  # collisions are rare: span > count * 4 is checked
        fresh = torch.randint(0, span, (2 * count,), generator=g)
        chosen = torch.unique(torch.cat([chosen, fresh]))
    order = torch.randperm(chosen.numel(), generator=g)[:count]
    return chosen[order] + low


def draw_in_domain(
    domain: IntegerDomain,
    seed: int,
    template: torch.Tensor,
    upper: int | None = None,
) -> torch.Tensor:
    """Values shaped and typed like ``template`` (the reference's own draw), inside
    ``domain`` with its structure; ``upper`` an exclusive bound that narrows ``max``
    (``index_bound`` at the case's sizes).

    A ``fixed`` input, and one whose structure cannot be drawn at this size (more distinct
    values wanted than the range holds), comes back as the template: the reference's own
    values are always inside its domain.
    """
    dtype, shape = template.dtype, tuple(template.shape)
    g = torch.Generator().manual_seed(seed)
    if domain.any:
        return _any_bits(g, shape, dtype)
    if IntegerStructure.FIXED in domain.structure or template.numel() == 0:
        return template.clone()
    low, high = domain.min, domain.max
    if upper is not None:
        high = min(high, upper - 1)
    if dtype != torch.bool:
        info = torch.iinfo(dtype)
        low, high = max(low, info.min), min(high, info.max, torch.iinfo(torch.int64).max - 1)
    if high < low:
        return template.clone()
    span = high - low + 1
    numel = template.numel()
    row = shape[-1] if shape else 1
    if IntegerStructure.UNIQUE in domain.structure:
        if span < numel or (span > PERMUTATION_LIMIT and span < 4 * numel):
            return template.clone()
        values = _sample_without_replacement(g, numel, low, span).reshape(shape)
    elif IntegerStructure.UNIQUE_ROWS in domain.structure:
        rows = max(numel // max(row, 1), 1)
        if span < row or span * rows > PERMUTATION_LIMIT:
            return template.clone()
        values = torch.rand((rows, span), generator=g).argsort(dim=-1)[:, :row] + low
        values = values.reshape(shape)
    else:
        values = torch.randint(low, high + 1, shape, generator=g, dtype=torch.int64)
    if IntegerStructure.SORTED in domain.structure and values.dim() >= 1:
        values = values.sort(dim=-1).values
        if IntegerStructure.SPANS in domain.structure:
            values[..., 0], values[..., -1] = low, high
    return values.to(dtype)


def _any_bits(g: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Every value of ``dtype`` equally likely: arbitrary bits (``IntegerDomain.any``)."""
    itemsize = torch.empty(0, dtype=dtype).element_size()
    raw = torch.randint(0, 256, (math.prod(shape) * itemsize,), generator=g, dtype=torch.uint8)
    if dtype == torch.bool:
        return (raw & 1).bool().reshape(shape)
    return raw.view(dtype).reshape(shape)
