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
subset is chosen deterministically from the seed and bounded by ``MAX_CASES``.

A dim that sizes no input tensor (``kernel_size``, ``out_features``) grows the weights,
outputs and work instead, which the input cap cannot see: ``choose`` also asks an
``affordable`` check (``inputs.footprint``) of every value it is about to use for one.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from kernelgate.contract.spec import Contract, Dim, TensorSpec

MAX_CASES = 8  # shapes per CMP-03 run (before the confirmation cases of a narrowing)
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


def choose(
    contract: Contract,
    dims: list[Dim],
    seed: int,
    cap: int,
    affordable: Affordable | None = None,
) -> tuple[list[ShapePoint], dict[str, dict[str, list[int]]]]:
    """A seeded, bounded set of shape points over ``dims``, and every dim's candidate pools.

    Each dim gets an equal share of ``MAX_CASES`` (at least one); families are visited in
    turn (min, block, large, prime, npot) so every share covers the edge cases first. The
    pools hold the values within the input cap; a drawn value that ``affordable`` refuses
    (``FootprintLimit.admits``; asked only of drawn values, since measuring costs time) is
    passed over.
    """
    rng = random.Random(seed)
    order = list(dims)
    if len(order) > MAX_CASES:
        order = sorted(rng.sample(order, MAX_CASES), key=dims.index)
    quota = max(1, MAX_CASES // max(len(order), 1))
    pools: dict[str, dict[str, list[int]]] = {}
    points: list[ShapePoint] = []
    for dim in order:
        per_unit = max(
            input_elements(contract, {dim.name: 2}) - input_elements(contract, {dim.name: 1}), 1
        )
        fixed = input_elements(contract, {dim.name: 0})
        reference_total = input_elements(contract, {})
        budget = max(cap, reference_total)
        fits = max((budget - fixed) // per_unit, 1)
        pool = families(dim, fits)
        # Every value must fit the budget by its exact element count: a dim used twice in one
        # input (B, T, T) grows the inputs faster than the linear ``fits`` estimate.
        pool = {
            name: [v for v in values if input_elements(contract, {dim.name: v}) <= budget]
            for name, values in pool.items()
        }
        pools[dim.name] = pool
        shuffled = {name: rng.sample(values, len(values)) for name, values in pool.items()}
        chosen: list[ShapePoint] = []
        while len(chosen) < quota and any(shuffled.values()):
            for name in FAMILIES:
                if shuffled[name] and len(chosen) < quota:
                    value = shuffled[name].pop()
                    if all(p.value != value for p in chosen) and (
                        affordable is None or affordable(dim.name, value)
                    ):
                        chosen.append(ShapePoint(dim.name, value, name))
        points.extend(chosen)
    return points[:MAX_CASES], pools


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
