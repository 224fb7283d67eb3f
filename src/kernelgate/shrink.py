"""Shrinking a failing case to one a person can read, as Hypothesis does.

A counterexample at the reference shape (30 x 1000 values) says that a kernel is wrong,
not why. After the gates, each failed gate that judges its cases one by one
(``Gate.shrinkable``) has its failing case reduced while the gate still fails the same way
(the first finding of the same kind, on the same output):

1. **Dims.** Each contract dim that names an input axis, in the contract's order, takes the
   smallest admitted size (its ``min`` and ``multiple_of`` kept) at which the case still
   fails, trying the smallest first and then halvings; the window kept along the axis holds
   the first failing output position where an output has the same dim, else starts at 0.
   Only the inputs are sliced: the reference is run as it is on them (a size it cannot
   take, one that shapes its parameters, simply does not shrink).
2. **Values.** Each floating input is set to zeros or ones, whole, then in halves,
   quarters, ... of its elements (delta debugging): a part stays simple where the gate still
   fails, so what is left are the values the failure needs.

The candidate runs only in the worker (``GateContext.run``), as in the gates; every call
comes after the last judged one (and after AUTH-01's profiled call), so no verdict changes
with shrinking. The work is bounded (``ShrinkOptions``: candidate calls and seconds). The
result is confirmed as the first call of a fresh instance, as ``kernelgate replay --shrunk``
runs it: a failure that needs earlier calls (a cache) keeps no shrunk case, and says so.

The evidence keeps ``counterexample.shrunk`` (docs/evidence.md): the case, each input's
name, shape, dtype, a fill value and the positions and values that differ from it, the
dims' sizes, the findings and reason of the confirming run, and the work it took.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelgate.contract.spec import TensorSpec
from kernelgate.gates.base import Case, Gate, GateAborted, GateContext, GateResult, Status
from kernelgate.sandbox.wire import DTYPES, dtype_name
from kernelgate.serde import to_jsonable

# A shrunk case is kept in the evidence only when its inputs have at most this many values
# other than their fill: "a few positions and values", not a tensor dump.
MAX_STORED_VALUES = 4096
FILLS = (0.0, 1.0)  # the simple values tried in place of the drawn ones
NEEDS_EARLIER_CALLS = (
    "not kept: the shrunk case does not fail the same way as a fresh instance's first call "
    "(the failure needs earlier calls)"
)
# Seconds a shrinking call may take at least, however little of the budget is left (the
# judged calls' own --timeout where that is less).
MIN_CALL_TIMEOUT = 5.0


@dataclass
class ShrinkOptions:
    """The work shrinking may do, over all failed gates of one verdict."""

    max_calls: int = 60  # candidate calls
    # wall seconds, checked before each call (the fresh instance that confirms the result
    # comes after: its start-up overlaps the shrinking, ``prefetch_instance``)
    max_seconds: float = 10.0


class _Spent(Exception):
    """The shrinking budget is spent: keep what has been reached."""


@dataclass
class _Budget:
    options: ShrinkOptions
    started: float = field(default_factory=time.monotonic)
    calls: int = 0

    def remaining(self) -> float:
        return self.options.max_seconds - (time.monotonic() - self.started)

    def spent(self) -> str | None:
        """Why no call is left (None: some are)."""
        if self.calls >= self.options.max_calls:
            return f"budget of {self.options.max_calls} candidate calls spent"
        if self.remaining() < 0:
            return f"budget of {self.options.max_seconds:g} s spent"
        return None

    def charge(self) -> None:
        why = self.spent()
        if why is not None:
            raise _Spent(why)
        self.calls += 1


def signature(failure: GateResult) -> tuple[Any, ...]:
    """What makes two failures of one gate "the same way": the first finding's kind (its
    keys) and output."""
    findings = failure.counterexample.findings if failure.counterexample else []
    first = findings[0] if findings else {}
    return (tuple(sorted(first)), first.get("output"), first.get("problem"))


class Shrinker:
    """Reduces one failed gate's case (see the module's docstring)."""

    def __init__(
        self, ctx: GateContext, gate: Gate, original: GateResult, case: Case, budget: _Budget
    ) -> None:
        self.ctx, self.gate, self.budget = ctx, gate, budget
        self.label, self.seed = case.label, case.seed
        self.want = signature(original)
        self.values = [v.clone() if isinstance(v, torch.Tensor) else v for v in case.values]
        self.first = (original.counterexample.findings or [{}])[0]
        self.sizes: dict[str, int] = {}
        self.stopped = "nothing smaller fails the same way"
        self.steps = 0  # reductions kept

    def still_fails(self, values: list[Any]) -> bool:
        """Whether the gate fails the same way on ``values`` (one candidate call)."""
        if self.ctx.halted:  # a shrinking call hung: the worker is gone
            raise _Spent(f"stopped: {self.ctx.halted}")
        self.budget.charge()
        case = Case(self.label, self.seed, values)
        session = self.ctx.session
        judged_timeout = session.timeout
        # a call that hangs at a shrunk size costs the budget's seconds, not --timeout's
        session.timeout = min(judged_timeout, max(MIN_CALL_TIMEOUT, self.budget.remaining()))
        try:
            failure = self.gate.judge_case(self.ctx, case, self.ctx.run(self.gate.id, case))
        except GateAborted:  # an incident is another failure (and RES-01 has been judged)
            return False
        except Exception:  # the reference cannot take these inputs (a sliced parameter dim)
            return False
        finally:
            session.timeout = judged_timeout
        if failure is None or signature(failure) != self.want:
            return False
        self.values = case.values  # as admitted: what the candidate and the oracle saw
        self.steps += 1
        return True

    def shrink(self) -> None:
        try:
            self._dims(by_values=False)
            self._values()
            # again, each window now around the first value the failure kept: a smaller
            # size may hold it that the first window (at the failing output) missed
            self._dims(by_values=True)
            self._values()
        except _Spent as spent:
            self.stopped = str(spent)

    # -- dims -------------------------------------------------------------------------------
    def _axes(self, dim: str) -> list[tuple[int, int]]:
        """(input index, axis) of every input axis the contract names ``dim``."""
        axes = []
        for i, spec in enumerate(self.ctx.contract.inputs):
            value = self.values[i] if i < len(self.values) else None
            if not isinstance(spec, TensorSpec) or not isinstance(value, torch.Tensor):
                continue
            if len(spec.shape) != value.dim():
                continue
            axes += [(i, axis) for axis, name in enumerate(spec.shape) if name == dim]
        return axes

    def _kept_value_at(self, axes: list[tuple[int, int]]) -> int:
        """Along the first of ``axes``, where the first value other than a fill lies (0:
        none)."""
        i, axis = axes[0]
        value = self.values[i]
        if not value.is_floating_point():
            return 0
        other = torch.ones(value.shape, dtype=torch.bool)
        for fill in FILLS:
            other &= value != fill
        found = other.nonzero()
        return int(found[0][axis]) if len(found) else 0

    def _focus(self, dim: str) -> int:
        """The first failing output position along ``dim`` (0 where no output has it)."""
        position = self.first.get("output_position")
        output = self.first.get("output", 0)
        outputs = self.ctx.contract.outputs
        if not isinstance(position, list) or not isinstance(output, int):
            return 0
        if output >= len(outputs) or len(outputs[output].shape) != len(position):
            return 0
        names = outputs[output].shape
        return next((int(position[j]) for j, name in enumerate(names) if name == dim), 0)

    def _dims(self, *, by_values: bool) -> None:
        """Each dim at the smallest size that still fails, its window around the first
        failing output position, or (``by_values``) the first value not a fill."""
        for dim in self.ctx.contract.dims:
            axes = self._axes(dim.name)
            if not dim.varies or not axes:
                continue
            i, axis = axes[0]
            current = self.values[i].shape[axis]
            if any(self.values[j].shape[a] != current for j, a in axes):
                continue  # the inputs disagree on it: not one size to shrink
            focus = self._kept_value_at(axes) if by_values else self._focus(dim.name)
            focus = min(focus, current - 1)
            for size in _smaller_sizes(dim.min, dim.multiple_of, current):
                starts = dict.fromkeys([max(0, min(focus - size // 2, current - size)), 0])
                if any(self.still_fails(_sliced(self.values, axes, s, size)) for s in starts):
                    self.sizes[dim.name] = size
                    break

    # -- values -----------------------------------------------------------------------------
    def _values(self) -> None:
        for i, value in enumerate(self.values):
            if isinstance(value, torch.Tensor) and value.is_floating_point() and value.numel():
                self._simplify(i)

    def _simplify(self, i: int) -> None:
        """Input ``i`` set to a fill value in ever smaller parts, where the gate still fails."""
        n = self.values[i].numel()
        parts = 1
        while parts <= n:
            bounds = [(n * p // parts, n * (p + 1) // parts) for p in range(parts)]
            for lo, hi in bounds:
                flat = self.values[i].reshape(-1)
                if hi <= lo or _is_fill(flat[lo:hi]):
                    continue
                for fill in FILLS:
                    trial = list(self.values)
                    simpler = self.values[i].clone()
                    simpler.view(-1)[lo:hi] = fill
                    trial[i] = simpler
                    if self.still_fails(trial):
                        break
            parts *= 2

    def record(self, confirmed: GateResult) -> dict[str, Any] | None:
        """The evidence's ``shrunk``, or None when its inputs are not small enough to keep."""
        inputs = []
        specs = self.ctx.contract.inputs
        for i, value in enumerate(self.values):
            name = specs[i].name if i < len(specs) else f"arg{i}"
            if not isinstance(value, torch.Tensor):
                inputs.append({"name": name, "value": to_jsonable(value)})
                continue
            described = describe_tensor(name, value)
            if described is None:
                return None
            inputs.append(described)
        cx = confirmed.counterexample
        return {
            "case": self.label,
            "seed": self.seed,
            "inputs": inputs,
            "sizes": self.sizes,
            "reason": confirmed.reason,
            "findings": to_jsonable(cx.findings if cx else []),
            "calls": self.budget.calls,
            "stopped": self.stopped,
            "replay": None,  # the replay command, once an evidence file holds it (cli.py)
        }


def _smaller_sizes(low: int, multiple: int, current: int) -> list[int]:
    """Admitted sizes below ``current``, smallest first: the least, then halvings."""
    multiple = max(1, multiple)
    least = -(-max(1, low) // multiple) * multiple
    sizes = {least}
    size = current // 2
    while size > least:
        sizes.add(size // multiple * multiple)
        size //= 2
    return sorted(s for s in sizes if least <= s < current)


def _sliced(values: list[Any], axes: list[tuple[int, int]], start: int, size: int) -> list[Any]:
    out = list(values)
    for i, axis in axes:
        out[i] = out[i].narrow(axis, start, size).clone()
    return out


def _is_fill(part: torch.Tensor) -> bool:
    return any(bool((part == fill).all()) for fill in FILLS)


def describe_tensor(name: str, value: torch.Tensor) -> dict[str, Any] | None:
    """A tensor as a fill and the positions that differ from it (None: too many)."""
    flat = value.reshape(-1)
    fill = max(FILLS, key=lambda f: int((flat == f).sum())) if value.numel() else 0.0
    if not value.is_floating_point():
        fill = int(fill)
    differ = flat != fill  # NaN differs from every fill
    if value.is_floating_point():
        differ |= torch.signbit(flat)  # -0.0 equals the fill 0.0, but is not its bits
    differ = differ.nonzero().reshape(-1)
    if differ.numel() > MAX_STORED_VALUES:
        return None
    entries = []
    for index in differ.tolist():
        position = list(torch.unravel_index(torch.tensor(index), value.shape))
        element = flat[index].item()
        entries.append({"position": [int(p) for p in position], "value": element})
    return {
        "name": name,
        "shape": list(value.shape),
        "dtype": dtype_name(value.dtype),
        "fill": fill,
        "values": to_jsonable(entries),
    }


def rebuild_tensor(entry: dict[str, Any]) -> torch.Tensor:
    """The tensor ``describe_tensor`` described, bit for bit (CPU)."""
    try:
        dtype = DTYPES[entry["dtype"]]
    except KeyError:
        raise ValueError(f"unknown dtype {entry.get('dtype')!r}") from None
    tensor = torch.full(entry["shape"], float(entry["fill"]), dtype=dtype)
    for item in entry["values"]:
        value = item["value"]
        tensor[tuple(item["position"])] = float(value) if isinstance(value, str) else value
    return tensor


def rebuild_case(shrunk: dict[str, Any]) -> Case:
    """The shrunk case stored in the evidence, as a ``Case`` to run again."""
    values = [
        rebuild_tensor(entry) if "shape" in entry else entry.get("value")
        for entry in shrunk["inputs"]
    ]
    return Case(shrunk["case"], int(shrunk["seed"]), values)


def run_shrunk_case(gate: Gate, ctx: GateContext, case: Case) -> GateResult:
    """``gate`` judged on the stored shrunk ``case`` alone (``kernelgate replay --shrunk``):
    its failure, a pass, or skipped where the call had an incident (RES-01 says which)."""
    started = time.monotonic()
    try:
        failure = gate.judge_case(ctx, case, ctx.run(gate.id, case))
    except GateAborted as aborted:
        failure = gate.skipped(f"aborted by an execution incident: {aborted} (see RES-01)")
    result = failure or gate.passed("the shrunk case passes")
    result.seconds = round(time.monotonic() - started, 3)
    return result


def shrink_failures(
    ctx: GateContext, gates: dict[str, Gate], results: list[GateResult], options: ShrinkOptions
) -> None:
    """Shrink every failed shrinkable gate's case, within ``options``'s budget, and put the
    result in its counterexample (``shrunk``) and what it cost in its evidence (``shrink``).
    """
    budget = _Budget(options)
    ctx.keep_failing_cases = False  # the shrinking calls' failures are not kept
    stateful: str | None = None  # set when a shrunk case failed only after earlier calls
    for result in results:
        gate = gates.get(result.id)
        cx = result.counterexample
        if result.status is not Status.FAIL or cx is None or gate is None:
            continue
        case = ctx.failing_cases.get((result.id, cx.case, cx.seed))
        if not gate.shrinkable or case is None or ctx.halted:
            continue
        spent = budget.spent()
        if spent is not None or stateful is not None:  # it keeps its case as found
            result.evidence["shrink"] = {
                "calls": 0,
                "seconds": 0.0,
                "stopped": spent or "not started",
                "kept": False,
                "note": "not shrunk: the budget went to earlier gates"
                if stateful is None
                else "not shrunk: " + stateful,
            }
            continue
        started = time.monotonic()
        calls_before = budget.calls
        ctx.prefetch_instance()  # the confirming instance starts up beside the shrinking
        shrinker = Shrinker(ctx, gate, result, case, budget)
        shrinker.shrink()
        if shrinker.steps:
            note = _confirm(ctx, gate, shrinker, cx)
            if note.startswith(NEEDS_EARLIER_CALLS):  # its other failures would need them too
                stateful = f"{gate.id}'s shrunk case needed earlier calls (a stateful candidate)"
        else:  # the case as found is the counterexample itself: nothing to keep
            note = "not kept: no reduction failed the same way within the budget"
        result.evidence["shrink"] = {
            "calls": budget.calls - calls_before,
            "seconds": round(time.monotonic() - started, 3),
            "stopped": shrinker.stopped,
            "kept": cx.shrunk is not None,
            "note": note,
        }
        if cx.shrunk is not None:
            cx.shrunk["calls"] = budget.calls - calls_before
    ctx.failing_cases.clear()


def _confirm(ctx: GateContext, gate: Gate, shrinker: Shrinker, cx: Any) -> str:
    """Run the shrunk case as a fresh instance's first call (as a replay does); keep it in
    ``cx.shrunk`` only when it fails the same way there. Returns what happened."""
    case = Case(shrinker.label, shrinker.seed, shrinker.values)
    try:
        with ctx.fresh_instance(gate.id) as session:
            failure = gate.judge_case(ctx, case, ctx.run(gate.id, case, session=session))
    except GateAborted as aborted:
        return f"not kept: the confirming run had an incident ({aborted})"
    if failure is None or signature(failure) != shrinker.want:
        return NEEDS_EARLIER_CALLS
    cx.shrunk = shrinker.record(failure)
    if cx.shrunk is None:
        return f"not kept: more than {MAX_STORED_VALUES} values differ from a fill"
    return "confirmed as a fresh instance's first call"
