"""Held-out shapes for CMP-03, drawn from the contract's dims, and the sub-domain they support.

Kernels written for one shape break at others in a few recurring ways: a grid of one block
(wrong once N > BLOCK), a tail mask computed as ``n // BLOCK * BLOCK`` (wrong when
``n % BLOCK != 0``), a size read from a module constant, a size-1 edge case. So the values
tried for a dim come from named families:

- ``min``: the smallest size the dim admits (1 for most dims);
- ``block``: block size +- one step for the powers of two 16..1024 (127, 129, ..., 1025);
- ``prime``: primes (no block size divides them);
- ``npot``: other non-powers of two (3 * 2**k, reference + one step);
- ``large``: the largest admitted size whose inputs fit the element cap (bounded by
  ``LARGE_FACTOR`` times the reference size, so one run stays affordable).

Only values the ``Dim`` admits are used (min/max/multiple_of/varies). One dim moves at a time,
the others stay at their reference sizes, so a failure names the dim that caused it. The
subset is chosen deterministically from the seed, spread over every varying dim (batch-like
leading dims first, one shape per dim per round) and bounded by ``case_budget``.

A dim that sizes no input tensor (``kernel_size``, ``out_features``) grows the weights,
outputs and work instead, which the input cap cannot see: ``choose`` also asks an
``affordable`` check (``inputs.footprint``) of every value it is about to use for one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from kernelgate.contract.spec import Contract, Dim, TensorSpec

MAX_CASES = 8  # shapes per CMP-03 run (before the confirmation cases of a narrowing)
MAX_CASES_WIDE = 12  # ... raised to one per varying dim, up to this many
CPU_ELEMENT_CAP = 1 << 16  # total input elements per case under the Triton interpreter
DEVICE_ELEMENT_CAP = 1 << 24  # total input elements per case on a GPU
LARGE_FACTOR = 16  # "large" is at most this many times the reference size (or LARGE_FLOOR)
LARGE_FLOOR = 4096
BLOCKS = tuple(1 << k for k in range(4, 11))  # 16 .. 1024
PRIMES = (2, 3, 5, 7, 13, 31, 61, 97, 251, 509, 997, 1021, 2039, 4093)
FAMILIES = ("min", "block", "large", "prime", "npot")


@dataclass(frozen=True)
class ShapePoint:
    """One held-out shape: ``dim`` set to ``value``, every other dim at its reference."""

    dim: str
    value: int
    family: str

    @property
    def label(self) -> str:
        return f"{self.dim}={self.value} ({self.family})"


def input_elements(contract: Contract, sizes: dict[str, int]) -> int:
    """Total elements of the tensor inputs when the named dims take ``sizes``."""
    reference = {d.name: d.reference for d in contract.dims}
    total = 0
    for spec in contract.inputs:
        if not isinstance(spec, TensorSpec):
            continue
        total += math.prod(
            int(size) if isinstance(size, int) else sizes.get(size, reference.get(size, 1))
            for size in spec.shape
        )
    return total


Affordable = Callable[[str, int], bool]


def sizes_an_input(contract: Contract, name: str) -> bool:
    """Whether dim ``name`` sizes some input tensor (so the input cap bounds it)."""
    return input_elements(contract, {name: 2}) != input_elements(contract, {name: 1})


def _round_down(value: int, multiple: int) -> int:
    return value // multiple * multiple


def families(dim: Dim, fits: int) -> dict[str, list[int]]:
    """Admitted values per family for ``dim``; ``fits`` is the largest value within the cap."""
    step = max(dim.multiple_of, 1)
    top = fits if dim.max is None else min(fits, dim.max)
    smallest = next((v for v in range(dim.min, dim.min + step + 1) if dim.admits(v)), None)
    pools: dict[str, list[int]] = {
        "min": [smallest] if smallest is not None else [],
        "block": [b + sign * step for b in BLOCKS for sign in (-1, 1)],
        "prime": list(PRIMES),
        "npot": [3 << k for k in range(2, 11)] + [dim.reference + step],
        "large": [],
    }
    large_target = min(top, max(LARGE_FACTOR * dim.reference, LARGE_FLOOR))
    large = _round_down(large_target, step)
    if large > dim.reference and dim.admits(large):
        pools["large"] = [large]
    for name, pool in pools.items():
        pools[name] = sorted({v for v in pool if v != dim.reference and v <= top and dim.admits(v)})
    return pools


def batch_like(contract: Contract, name: str) -> bool:
    """Whether dim ``name`` is the leading axis of some tensor input (a batch)."""
    return any(spec.shape[:1] == [name] for spec in contract.tensor_inputs)


def _rank(contract: Contract, name: str) -> int:
    """0 batch-like, 1 sizes another input axis, 2 sizes outputs only, 3 no tensor at all
    (a size that shapes only parameters)."""
    if batch_like(contract, name):
        return 0
    if sizes_an_input(contract, name):
        return 1
    if any(name in spec.shape for spec in contract.outputs):
        return 2
    return 3


def case_budget(varying: int) -> int:
    """Shapes per CMP-03 run: ``MAX_CASES``, raised to one case per varying dim up to
    ``MAX_CASES_WIDE`` so that a reference with many sizes still has each one moved."""
    return max(MAX_CASES, min(varying, MAX_CASES_WIDE))


@dataclass
class ShapePlan:
    """The held-out shapes of one CMP-03 run, the pools they came from, and why a dim that
    the contract lets vary got no shape (``unvaried``)."""

    points: list[ShapePoint]
    pools: dict[str, dict[str, list[int]]]
    order: list[str]
    unvaried: dict[str, str]


def _turns(pool: dict[str, list[int]], rng: random.Random) -> Iterator[tuple[str, int]]:
    """A dim's values in the order they are tried: the families in turn (min, block, large,
    prime, npot), a seeded draw within each."""
    shuffled = {name: rng.sample(values, len(values)) for name, values in pool.items()}
    while any(shuffled.values()):
        for name in FAMILIES:
            if shuffled.get(name):
                yield name, shuffled[name].pop()


def _pool(contract: Contract, dim: Dim, cap: int) -> dict[str, list[int]]:
    per_unit = max(
        input_elements(contract, {dim.name: 2}) - input_elements(contract, {dim.name: 1}), 1
    )
    fixed = input_elements(contract, {dim.name: 0})
    budget = max(cap, input_elements(contract, {}))
    fits = max((budget - fixed) // per_unit, 1)
    # Every value must fit the budget by its exact element count: a dim used twice in one
    # input (B, T, T) grows the inputs faster than the linear ``fits`` estimate.
    return {
        name: [v for v in values if input_elements(contract, {dim.name: v}) <= budget]
        for name, values in families(dim, fits).items()
    }


def choose(
    contract: Contract,
    dims: list[Dim],
    seed: int,
    cap: int,
    affordable: Affordable | None = None,
) -> ShapePlan:
    """A seeded, bounded set of shape points spread over every dim in ``dims``.

    Dims are visited batch-like first (the leading axis of an input), then other input
    dims, output-only dims and parameter-only dims, one shape per dim per round, until
    ``case_budget`` shapes are chosen or every pool is spent; so each dim gets a shape
    before any gets a second, and a dim with few admitted sizes leaves its turns to the
    others. Within a dim the families are visited in turn so its first shapes cover the
    edge cases. The pools hold the values within the input cap; a drawn value that
    ``affordable`` refuses (``FootprintLimit.admits``; asked only of drawn values, since
    measuring costs time) is passed over.
    """
    rng = random.Random(seed)
    order = sorted(dims, key=lambda d: (_rank(contract, d.name), dims.index(d)))
    budget = case_budget(len(order))
    pools = {dim.name: _pool(contract, dim, cap) for dim in order}
    turns = {dim.name: _turns(pools[dim.name], rng) for dim in order}
    chosen: dict[str, list[ShapePoint]] = {dim.name: [] for dim in order}
    refused: dict[str, int] = {dim.name: 0 for dim in order}
    points: list[ShapePoint] = []
    active = [dim.name for dim in order]
    while active and len(points) < budget:
        for name in list(active):
            if len(points) >= budget:
                break
            for family, value in turns[name]:
                if any(p.value == value for p in chosen[name]):
                    continue
                if affordable is not None and not affordable(name, value):
                    refused[name] += 1
                    continue
                chosen[name].append(ShapePoint(name, value, family))
                points.append(chosen[name][-1])
                break
            else:
                active.remove(name)
    unvaried = {}
    for dim in order:
        if chosen[dim.name]:
            continue
        if not any(pools[dim.name].values()):
            unvaried[dim.name] = f"no size it admits fits the element cap ({cap})"
        elif refused[dim.name] and dim.name not in active:
            unvaried[dim.name] = "every size it admits was refused by the footprint limit"
        else:
            unvaried[dim.name] = f"the case budget ({budget}) was spent on dims listed earlier"
    return ShapePlan(points, pools, [dim.name for dim in order], unvaried)


def sub_dim(dim: Dim, passing: list[int], failing: list[int]) -> Dim:
    """The widest restriction of ``dim`` that keeps its reference and excludes ``failing``.

    Candidates restrict the range to tested passing values (a new min or max) and/or raise
    ``multiple_of`` to a power-of-two multiple that divides the reference. Among those that
    exclude every failing value, the one admitting the most passing values wins, then the
    larger multiple_of (the tightest divisibility the passing sizes share: a sub-domain must
    not claim sizes nearer the failures than the evidence), then the wider range. Fixing the
    dim at its reference always works.
    """
    ref = dim.reference
    mins = sorted({dim.min, ref, *(v for v in passing if v <= ref)})
    maxes = sorted(
        {ref, *(v for v in passing if v >= ref)} | ({dim.max} if dim.max is not None else set()),
        key=lambda v: v,
    )
    if dim.max is None:
        maxes_opt: list[int | None] = [None, *maxes]
    else:
        maxes_opt = list(maxes)
    base = max(dim.multiple_of, 1)
    mults = [base * (1 << k) for k in range(0, 21) if ref % (base * (1 << k)) == 0]
    best: tuple[tuple[int, int, float], Dim] | None = None
    for lo in mins:
        for hi in maxes_opt:
            for mult in mults:
                cand = replace(dim, min=lo, max=hi, multiple_of=mult)
                if not cand.admits(ref) or any(cand.admits(v) for v in failing):
                    continue
                span = math.inf if hi is None else hi - lo
                score = (sum(cand.admits(v) for v in passing), mult, span)
                if best is None or score > best[0]:
                    best = (score, cand)
    only_ref = best is not None and (
        ref - best[1].multiple_of < best[1].min
        and best[1].max is not None
        and ref + best[1].multiple_of > best[1].max
    )
    if best is None or only_ref:
        return replace(dim, min=ref, max=ref, varies=False)
    return best[1]
