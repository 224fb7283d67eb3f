"""Outputs judged by their kind: floating values, exact integers, indices by equivalence.

``output_kind`` is the one place that decides how an output is compared; every value gate
reaches it through ``GateContext.assess``. Floating outputs go to the error models
(``error_models``). Integer and bool outputs are compared exactly: an error model's bound,
relative to |ref| and to honest runs that disagree on a tie, would let an off-by-one
through. Index outputs (topk, sort, argsort, argmax, argmin, max/min/median with indices,
kthvalue) are compared by what they mean, not bit for bit: where the values tie, any of the
tied positions is right, so the candidate's indices are taken as positions into the op's
own input (the float64 oracle's), and the values there must be the oracle's values, in the
order the op's arguments promise (``IndexOrder``), each index in range and, for ops that
return a set of positions, no position twice.
"""

from __future__ import annotations

from typing import Any

import torch

from kernelgate.contract.spec import IndexOrder, IndexOutput, OutputKind, OutputSpec
from kernelgate.oracle.compare import MAX_POSITIONS, first_positions, judging_device, scalar
from kernelgate.oracle.error_models import SAFETY, Assessment


def output_kind(spec: OutputSpec | None, expected: torch.Tensor) -> OutputKind:
    """How an output is compared: the contract's ``kind`` where it states one (an index
    output needs its ``indices`` record too), else by the oracle's dtype."""
    if spec is not None and spec.kind is not None:
        if spec.kind is OutputKind.INDICES and spec.indices is None:
            return OutputKind.EXACT
        return spec.kind
    if expected.is_floating_point() or expected.is_complex():
        return OutputKind.VALUES
    return OutputKind.EXACT


def assess_exact(
    expected: torch.Tensor, actual: torch.Tensor, honest: dict[str, torch.Tensor] | None = None
) -> Assessment:
    """Integer or bool output: equal to the oracle's at every position, except where an
    honest evaluation of the reference (``honest``) gives another value than the float64
    oracle (a float rounded to an integer on a tie): the reference decides nothing there,
    and those positions are counted as excluded. Compared on the candidate's device, else
    the oracle's (``compare.judging_device``)."""
    device = judging_device(actual, expected)
    want = expected.detach().to(device, torch.int64)
    got = actual.detach().to(device, torch.int64)
    judged = torch.ones(want.shape, dtype=torch.bool, device=want.device)
    for run in (honest or {}).values():
        if isinstance(run, torch.Tensor) and tuple(run.shape) == tuple(want.shape):
            judged &= run.detach().to(want.device, torch.int64) == want
    wrong = judged & (got != want)
    mismatches = [
        {
            "output_position": list(pos),
            "expected": scalar(want[pos]),
            "actual": scalar(got[pos]),
            "abs_error": scalar((got[pos] - want[pos]).abs()),
            "bound": 0,
        }
        for pos in first_positions(wrong)
    ]
    count = int(wrong.count_nonzero())
    judged_count = int(judged.count_nonzero())
    return Assessment(
        model="exact",
        params={"output_dtype": str(actual.dtype).removeprefix("torch."), "bound": "equal"},
        worst_ratio=float("inf") if count else 0.0,
        judged=judged_count,
        excluded=want.numel() - judged_count,
        mismatches=mismatches,
        note=f"{count} position(s) differ from the oracle's exact value" if count else "",
    )


def _positions(index: torch.Tensor, source: torch.Tensor, spec: IndexOutput) -> torch.Tensor:
    """``index`` as positions along the dim it indexes, shaped to gather from ``source``
    (``dim`` None: the flattened source), or as flat positions."""
    if spec.dim is None:
        return index.reshape(-1)
    dim = spec.dim % source.dim() if source.dim() else 0
    return index.unsqueeze(dim) if index.dim() == source.dim() - 1 else index


def _gather(source: torch.Tensor, index: torch.Tensor, spec: IndexOutput) -> torch.Tensor:
    """The source's values at ``index`` (in range), shaped like the positions."""
    positions = _positions(index, source, spec)
    if spec.dim is None or source.dim() == 0:
        return source.reshape(-1)[positions]
    return source.gather(spec.dim % source.dim(), positions)


def _same(a: torch.Tensor, b: torch.Tensor, tolerance: float) -> torch.Tensor:
    """Equal within ``tolerance`` (NaN equals NaN, infinities their own sign)."""
    close = (a - b).abs() <= tolerance
    return close | (a == b) | (a.isnan() & b.isnan())


def assess_indices(
    spec: IndexOutput,
    expected: torch.Tensor,
    actual: torch.Tensor,
    source: torch.Tensor,
    honest_source: dict[str, torch.Tensor],
) -> Assessment:
    """An index output by equivalence (see the module docstring).

    ``source`` is the op's input as the float64 oracle computes it, ``honest_source`` the
    same tensor from honest evaluations of the reference. When the source is the
    candidate's own input it is exact and the gathered values must equal the oracle's; when
    the reference computes it, an honest kernel's rounding may order near-ties otherwise, so
    values within ``SAFETY.ensemble`` x the largest honest error of the source count as
    equal (the ensemble model's bound, with the source's honest error as its noise).
    """
    source = source.detach().to(torch.float64)
    got = actual.detach().to(source.device, torch.int64)
    want = expected.detach().to(source.device, torch.int64)
    noise = 0.0
    for run in honest_source.values():
        if isinstance(run, torch.Tensor) and tuple(run.shape) == tuple(source.shape):
            diff = run.detach().to(source.device, torch.float64) - source
            finite = diff.isfinite()
            if finite.any():
                noise = max(noise, float(diff[finite].abs().max()))
    tolerance = SAFETY.ensemble * noise
    extent = source.numel() if spec.dim is None else source.shape[spec.dim % source.dim()]
    params: dict[str, Any] = {
        "output_dtype": str(actual.dtype).removeprefix("torch."),
        "op": spec.op,
        "call": spec.call,
        "dim": spec.dim,
        "order": spec.order.value,
        "distinct": spec.distinct,
        "source_worst_honest_abs_error": noise,
        "bound": f"|source[index] - oracle value| <= {SAFETY.ensemble} * {noise:.3e}",
    }
    problems: list[tuple[torch.Tensor, str]] = []
    in_range = (got >= 0) & (got < extent)
    if not bool(in_range.all()):
        problems.append((~in_range, f"index out of range [0, {extent})"))
        safe = torch.where(in_range, got, 0)
    else:
        safe = got
    gathered = _gather(source, safe, spec)
    oracle = _gather(source, want, spec)
    if spec.order is IndexOrder.ANY and spec.dim is not None and gathered.dim():
        dim = spec.dim % gathered.dim()
        matches = _same(gathered.sort(dim=dim).values, oracle.sort(dim=dim).values, tolerance)
        wrong_value = ~matches.all(dim=dim, keepdim=True).expand_as(matches)
    else:
        wrong_value = ~_same(gathered, oracle, tolerance)
    problems.append(
        (
            wrong_value.reshape(got.shape) & in_range,
            "the input at this index is not the oracle's value",
        )
    )
    positions = _positions(safe, source, spec)
    if spec.distinct and spec.dim is not None and positions.dim():
        dim = spec.dim % positions.dim()
        ordered, order = positions.sort(dim=dim)
        repeat = torch.zeros_like(ordered, dtype=torch.bool)
        repeat.narrow(dim, 1, ordered.shape[dim] - 1).copy_(
            ordered.narrow(dim, 1, ordered.shape[dim] - 1)
            == ordered.narrow(dim, 0, ordered.shape[dim] - 1)
        )
        repeated = torch.zeros_like(repeat).scatter(dim, order, repeat)
        problems.append((repeated.reshape(got.shape), "index repeated along the dim"))
    if spec.order is IndexOrder.STABLE and spec.dim is not None and positions.dim():
        dim = spec.dim % positions.dim()
        size = positions.shape[dim]
        ties = gathered.narrow(dim, 1, size - 1) == gathered.narrow(dim, 0, size - 1)
        backwards = positions.narrow(dim, 1, size - 1) <= positions.narrow(dim, 0, size - 1)
        unstable = torch.zeros_like(positions, dtype=torch.bool)
        unstable.narrow(dim, 1, size - 1).copy_(ties & backwards)
        problems.append(
            (unstable.reshape(got.shape), "tied values not in the stable order (ascending index)")
        )
    mismatches: list[dict[str, Any]] = []
    notes: list[str] = []
    flat_gathered, flat_oracle = gathered.reshape(got.shape), oracle.reshape(got.shape)
    for mask, problem in problems:
        count = int(mask.count_nonzero())
        if not count:
            continue
        notes.append(f"{count} position(s): {problem}")
        for pos in first_positions(mask)[: MAX_POSITIONS - len(mismatches)]:
            mismatches.append(
                {
                    "output_position": list(pos),
                    "problem": problem,
                    "index": scalar(got[pos]),
                    "oracle_index": scalar(want[pos]),
                    "value_at_index": scalar(flat_gathered[pos]) if bool(in_range[pos]) else None,
                    "oracle_value": scalar(flat_oracle[pos]),
                }
            )
    return Assessment(
        model="indices",
        params=params,
        worst_ratio=float("inf") if notes else 0.0,
        judged=got.numel(),
        excluded=0,
        mismatches=mismatches,
        note="; ".join(notes),
    )
