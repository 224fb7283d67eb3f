"""Derive a contract from a KernelBench reference program.

Which module-level sizes may vary, and over which range, is found by re-running the
*reference* with each size rebound to probe values (``PROBE_VALUES``, and the reference's
value +- 1, halved and doubled): the admissible set is the widest ``[min, max]`` with a
``multiple_of`` that holds every size the reference ran at and none it failed at
(``fit_range``), checked by a few more probes inside it. The candidate is never consulted.
Tensor dims are named after the size whose rebinding moves them; dims that no size moves
are literal. A size that moves no tensor but reshapes the model's parameters (a hidden
width, a group count) is a dim too, with no axis named after it.

Probes run on the meta device (shapes only, nothing allocated or computed) where the
reference runs there, on the CPU otherwise; a probe too large to run on the CPU is not
probed, which is never taken for a failure.
"""

from __future__ import annotations

import contextlib
import copy
import itertools
import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelgate.contract.spec import (
    Contract,
    Dim,
    ErrorModelSpec,
    IndexOutput,
    OutputKind,
    OutputSpec,
    Postcondition,
    Provenance,
    ScalarSpec,
    TensorSpec,
)
from kernelgate.errors import UnsupportedDtypeError
from kernelgate.formats.kernelbench import ReferenceProgram
from kernelgate.inputs.distributions import structure_of
from kernelgate.inputs.footprint import Expired, time_limit
from kernelgate.inputs.integers import derive_domain
from kernelgate.oracle.fp64 import cast_values, flatten_outputs
from kernelgate.sandbox.wire import dtype_name, unsupported_dtypes, unsupported_message

PROBE_VALUES = (1, 2, 3, 4, 5, 7, 11, 13)  # small sizes and primes, beside the reference's
PROBE_NUMEL_LIMIT = 1 << 24  # a CPU probe's input elements, or the reference's where larger
CHECK_ROUNDS = 4  # rounds of probes inside a fitted range before it is stated
CHECKS_PER_ROUND = 3
# A meta-device run slower than this is left for the CPU (the meta device runs a recurrent
# network step by step in Python). The reference's own run gets longer: the first meta run
# of a process also pays for torch's lazy imports and first-call set-up (3 s seen).
META_SECONDS = 20.0
PROBE_META_SECONDS = 5.0
PROBE_SECONDS = 10.0  # one probe; a slower one is not probed
DERIVE_SECONDS = 60.0  # all probes of one derivation; probes past it are not probed
STRUCTURE_SEED = 43  # get_inputs() is seeded 42 everywhere else; zeros both share are built in

PASSED, FAILED, NOT_PROBED = "passed", "failed", "not_probed"

Shapes = list[tuple[int, ...] | None]


@torch.no_grad()
def shape_run(
    model: torch.nn.Module,
    inputs: list[Any],
    mode_factory: Callable[[], Any] = contextlib.nullcontext,
    meta_seconds: float = META_SECONDS,
) -> tuple[list[Any], Any]:
    """The reference's outputs on ``inputs``, computed for their shapes and dtypes only.

    Tried on the meta device first (no arithmetic: a KernelBench-sized reference took a
    minute of CPU time per derivation, at half a dozen full-size probes), then on the CPU
    for references that meta kernels cannot run (data-dependent ops, tensors the forward
    creates on the CPU) or run slowly (the meta device runs a recurrent network step by step
    in Python: minutes for a 6-layer LSTM over 512 steps, seconds on the CPU), after
    ``meta_seconds``. ``mode_factory`` makes a fresh dispatch mode (an op recorder) for
    each attempt; the mode of the attempt that ran is returned beside the outputs. Errors
    of the CPU attempt propagate: that is the reference failing.
    """
    try:
        if meta_seconds <= 0:
            raise NotImplementedError("the meta device is known not to run this reference")
        mode = mode_factory()
        meta_model = copy.deepcopy(model).to("meta")
        with time_limit(meta_seconds), mode:
            outputs = flatten_outputs(meta_model(*cast_values(inputs, None, torch.device("meta"))))
        return outputs, mode
    except (Exception, Expired):
        mode = mode_factory()
        with mode:
            outputs = flatten_outputs(model(*inputs))
        return outputs, mode


def _shapes(values: Iterable[Any]) -> Shapes:
    return [tuple(v.shape) if isinstance(v, torch.Tensor) else None for v in values]


def _numel(values: Iterable[Any]) -> int:
    return sum(v.numel() for v in values if isinstance(v, torch.Tensor))


def _error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    return text[:200]


def _state_shapes(model: torch.nn.Module) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The model's parameters and buffers by name and shape: what a constructor size moves."""
    held = itertools.chain(model.named_parameters(), model.named_buffers())
    return tuple((name, tuple(t.shape)) for name, t in held)


def _meta_artifact(exc: BaseException) -> bool:
    """Whether an error on the meta device may be the device's, not the reference's."""
    return isinstance(exc, NotImplementedError) or "meta" in str(exc).lower()


@dataclass
class Probe:
    """The reference at one size: ``outcome`` and the shapes it made (None: not made)."""

    value: int
    outcome: str
    inputs: Shapes | None = None
    outputs: Shapes | None = None
    state: tuple[tuple[str, tuple[int, ...]], ...] | None = None
    error: str | None = None
    meta_outputs: list[Any] | None = None  # the outputs themselves, where made on meta


@dataclass
class Prober:
    """Runs the reference with sizes rebound: on the meta device where it runs there within
    ``PROBE_META_SECONDS``, on the CPU otherwise, each probe within ``PROBE_SECONDS`` and all
    of them within ``DERIVE_SECONDS``; a probe cut off is ``not_probed``."""

    program: ReferenceProgram
    reference_numel: int
    meta_runs: bool = True  # whether the reference runs on the meta device (and in time)
    seconds: float = DERIVE_SECONDS
    runs: int = field(default=0, init=False)
    deadline: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        self.deadline = time.monotonic() + self.seconds

    def run(
        self, sizes: dict[str, int], cpu: bool = True, meta_seconds: float = PROBE_META_SECONDS
    ) -> Probe:
        """The reference at ``sizes``; ``cpu=False``: on the meta device only (a probe the
        meta device cannot judge comes back ``not_probed``)."""
        value = next(iter(sizes.values()), 0)
        left = self.deadline - time.monotonic()
        if left <= 0:
            return Probe(value, NOT_PROBED, error=f"the {self.seconds:g} s of probing are spent")
        self.runs += 1
        limit = min(max(PROBE_SECONDS, meta_seconds), left)
        try:
            with time_limit(limit), torch.no_grad():
                return self._run(sizes, value, cpu, meta_seconds)
        except Expired:
            return Probe(value, NOT_PROBED, error=f"took longer than {limit:.3g} s")

    def _run(self, sizes: dict[str, int], value: int, cpu: bool, meta_seconds: float) -> Probe:
        program = self.program
        with program.rebound(**sizes):
            meta_inputs: list[Any] | None = None
            meta_model: torch.nn.Module | None = None
            state = None
            errors: list[Exception] = []  # get_inputs, then the constructor, on meta
            try:
                with torch.device("meta"):
                    meta_inputs = program.inputs(seed=42)
            except Exception as exc:
                errors.append(exc)
            try:
                with torch.device("meta"):
                    meta_model = program.build_model(program.init_inputs())
                    state = _state_shapes(meta_model)
            except Exception as exc:
                errors.append(exc)
            failure = next((e for e in errors if not _meta_artifact(e)), None)
            if self.meta_runs and failure is not None:  # both ran on meta at the reference
                shapes = None if meta_inputs is None else _shapes(meta_inputs)
                return Probe(value, FAILED, shapes, None, state, _error(failure))
            if self.meta_runs and meta_inputs is not None and meta_model is not None:
                started = time.monotonic()
                try:
                    with time_limit(meta_seconds):
                        outputs = flatten_outputs(meta_model(*meta_inputs))
                    shapes = _shapes(meta_inputs), _shapes(outputs)
                    return Probe(value, PASSED, *shapes, state, meta_outputs=outputs)
                except Expired:
                    if not cpu or time.monotonic() - started < meta_seconds:
                        raise  # the probe's own time is out
                    self.meta_runs = False  # slow on meta: the CPU from now on
                except Exception as exc:
                    if not _meta_artifact(exc):  # meta runs the reference: its failure
                        return Probe(value, FAILED, _shapes(meta_inputs), None, state, _error(exc))
            if not cpu:
                return Probe(value, NOT_PROBED, None, None, state, "not run on the CPU")
            limit = max(PROBE_NUMEL_LIMIT, self.reference_numel)
            if meta_inputs is not None and _numel(meta_inputs) > limit:
                why = f"inputs of {_numel(meta_inputs)} elements > {limit} on the CPU"
                return Probe(value, NOT_PROBED, _shapes(meta_inputs), None, state, why)
            if meta_inputs is None and self.reference_numel > limit // 2:
                # inputs only the CPU can build, of unknown size at a large reference: skip
                why = "input sizes not measurable on the meta device"
                return Probe(value, NOT_PROBED, None, None, state, why)
            try:
                inputs = program.inputs(seed=42)
            except Exception as exc:
                return Probe(value, FAILED, None, None, state, _error(exc))
            if _numel(inputs) > limit:
                why = f"inputs of {_numel(inputs)} elements > {limit} on the CPU"
                return Probe(value, NOT_PROBED, _shapes(inputs), None, state, why)
            try:
                model = program.build_model(program.init_inputs())
                state = _state_shapes(model)
                outputs = flatten_outputs(model(*inputs))
            except Exception as exc:
                return Probe(value, FAILED, _shapes(inputs), None, state, _error(exc))
            return Probe(value, PASSED, _shapes(inputs), _shapes(outputs), state)


def probe_values(reference: int) -> list[int]:
    """Sizes tried first, the reference's neighbours leading (they tell a size from a
    hyperparameter): +-1, doubled, halved, then the small sizes and primes."""
    order = [reference + 1, reference - 1, 2 * reference, reference // 2, *PROBE_VALUES]
    return [v for v in dict.fromkeys(order) if v >= 1 and v != reference]


def _divisors(value: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(value) + 1) if value % d == 0]
    return sorted({*small, *(value // d for d in small)})


def _admits(lo: int, hi: int | None, multiple: int, value: int) -> bool:
    return value >= lo and (hi is None or value <= hi) and value % multiple == 0


def fit_range(
    reference: int, passed: Iterable[int], failed: Iterable[int]
) -> tuple[int, int | None, int]:
    """The widest ``(min, max, multiple_of)`` that admits the reference and no failed size.

    Among the ranges that exclude every failure, the one admitting the most passed sizes
    wins; then the smallest ``multiple_of`` (a divisor of the reference: the loosest
    divisibility the probes allow, checked by later probes), then the lowest ``min`` and the
    highest ``max`` (None: unbounded). ``min`` and ``max`` are passed sizes (or 1 and None):
    a bound is never claimed past the sizes seen to run.
    """
    passed, failed = sorted(set(passed) - {reference}), sorted(set(failed))
    lows = sorted({1, reference, *(v for v in passed if v < reference)})
    highs: list[int | None] = [None, *sorted({reference, *(v for v in passed if v > reference)})]
    best: tuple[tuple[int, int, int, float], tuple[int, int | None, int]] | None = None
    for multiple in _divisors(reference):
        for lo in lows:
            for hi in highs:
                if any(_admits(lo, hi, multiple, v) for v in failed):
                    continue
                kept = sum(_admits(lo, hi, multiple, v) for v in passed)
                score = (kept, -multiple, -lo, math.inf if hi is None else hi)
                if best is None or score > best[0]:
                    best = (score, (lo, hi, multiple))
    assert best is not None  # (reference, reference, 1) excludes every failure
    return best[1]


def _checks(reference: int, lo: int, hi: int | None, multiple: int, tried: set[int]) -> list[int]:
    """Untried sizes inside a fitted range that test its loosest claims first: its smallest
    admitted size, the reference's admitted neighbours, its largest admitted size."""
    first = -(-lo // multiple) * multiple
    wanted = [first, first + multiple, reference - multiple, reference + multiple]
    if hi is not None:
        wanted.append(hi // multiple * multiple)
    fresh = [v for v in dict.fromkeys(wanted) if v >= 1 and v not in tried]
    return [v for v in fresh if _admits(lo, hi, multiple, v)][:CHECKS_PER_ROUND]


def _values(probes: dict[int, Probe], outcome: str) -> list[int]:
    return sorted(v for v, p in probes.items() if p.outcome == outcome)


def _at(probes: dict[int, Probe], values: list[int]) -> str:
    """``1, 3 (ValueError: ...)``: sizes and the error at the first of them."""
    first = probes[values[0]].error if values else None
    shown = ", ".join(map(str, values[:6])) + (", ..." if len(values) > 6 else "")
    return shown + (f" ({first})" if first else "")


def _dim(name: str, reference: int, probes: dict[int, Probe]) -> Dim:
    """The dim ``name`` as the probes allow it: ranged, or fixed with the reason.

    It varies only if its fitted set holds a size other than the reference that the
    reference was seen to run at: a set supported by no run (every probe failed or was too
    large to try) is not claimed."""
    passed, failed = _values(probes, PASSED), _values(probes, FAILED)
    record = {"passed": passed, "failed": failed, "not_probed": _values(probes, NOT_PROBED)}
    lo, hi, multiple = fit_range(reference, passed, failed)
    kept = [v for v in passed if _admits(lo, hi, multiple, v)]
    if not kept:  # no size but the reference is known to run
        if not passed and not failed:
            why = "no probe could run: " + "; ".join(
                f"{v}: {p.error}" for v, p in sorted(probes.items())[:3]
            )
        elif not passed:
            why = f"the reference fails at every probed size: {_at(probes, failed)}"
            if record["not_probed"]:  # a consistent set may remain there, but nothing seen run
                why += f"; not probed: {', '.join(map(str, record['not_probed']))}"
        else:
            why = (
                f"no range or divisibility holds the sizes the reference runs at "
                f"({', '.join(map(str, passed))}) without one it fails at: {_at(probes, failed)}"
            )
        return Dim(
            name, reference, reference, reference, 1, False, fixed_because=why, probes=record
        )
    reasons = []
    below = [v for v in failed if v < lo]
    above = [v for v in failed if hi is not None and v > hi]
    between = [v for v in failed if v not in below and v not in above]
    if below:
        reasons.append(f"min {lo}: fails at {_at(probes, below)}")
    if above:
        reasons.append(f"max {hi}: fails at {_at(probes, above)}")
    if between:
        reasons.append(f"multiple_of {multiple}: fails at {_at(probes, between)}")
    return Dim(
        name,
        reference,
        lo,
        hi,
        multiple,
        True,
        restricted_because="; ".join(reasons) or None,
        probes=record,
    )


def _moved(base: tuple[Shapes, Shapes], probe: Probe) -> set[tuple[int, int, int]]:
    """(0 inputs / 1 outputs, index, axis) of every tensor axis the probe resized."""
    moved: set[tuple[int, int, int]] = set()
    for side, shapes in ((0, probe.inputs), (1, probe.outputs)):
        if shapes is None:
            continue
        for i, (before, after) in enumerate(zip(base[side], shapes)):
            if before is None or after is None or len(before) != len(after):
                continue
            moved |= {(side, i, axis) for axis, (a, b) in enumerate(zip(before, after)) if a != b}
    return moved


def derive_dims(
    prober: Prober, model: torch.nn.Module, inputs: list[Any], outputs: list[Any]
) -> tuple[list[Dim], dict[tuple[int, int, int], str], list[str]]:
    """Every module-level size that moves a tensor axis or a parameter shape, as a ``Dim``;
    the tensor axes named after each (first size wins); the sizes no probe could run at.

    Sizes are probed in turns, one probe per size per turn, so a reference too slow to probe
    fully within ``DERIVE_SECONDS`` has each size probed a little rather than the first ones
    only. A size that moves nothing at its first two probes (and fails at neither) is a
    hyperparameter and is probed no further.
    """
    program = prober.program
    prober.deadline = time.monotonic() + prober.seconds  # the probing time starts here
    state = _state_shapes(model)
    base = (_shapes(inputs), _shapes(outputs))
    sizes = {name: value for name, value in program.sizes.items() if value >= 1}
    queues = {name: probe_values(value) for name, value in sizes.items()}
    probes: dict[str, dict[int, Probe]] = {name: {} for name in sizes}
    moved: dict[str, set[tuple[int, int, int]]] = {name: set() for name in sizes}
    reshapes_state = dict.fromkeys(sizes, False)
    done: set[str] = set()
    for turn in range(max(map(len, queues.values()), default=0)):
        for name in sizes:
            if name in done or turn >= len(queues[name]):
                continue
            probe = prober.run({name: queues[name][turn]})
            probes[name][probe.value] = probe
            moved[name] |= _moved(base, probe)
            reshapes_state[name] |= probe.state is not None and probe.state != state
            if turn == 1 and not moved[name] and not reshapes_state[name]:
                ran = [p.outcome for p in probes[name].values()]
                if ran == [PASSED, PASSED]:
                    done.add(name)  # +-1 ran and moved nothing: a hyperparameter
    dims: list[Dim] = []
    symbol: dict[tuple[int, int, int], str] = {}
    unprobed: list[str] = []
    for name, value in sizes.items():
        if not moved[name] and not reshapes_state[name]:
            if all(p.outcome == NOT_PROBED for p in probes[name].values()):
                unprobed.append(name)
            continue
        mine = probes[name]
        for _ in range(CHECK_ROUNDS):
            lo, hi, multiple = fit_range(value, _values(mine, PASSED), _values(mine, FAILED))
            fresh = _checks(value, lo, hi, multiple, set(mine) | {value})
            for probe_value in fresh:
                mine[probe_value] = prober.run({name: probe_value})
            if all(mine[v].outcome != FAILED for v in fresh):
                break
        dims.append(_dim(name, value, mine))
        for key in moved[name]:
            symbol.setdefault(key, name)
    return dims, symbol, unprobed


def require_supported_dtypes(values: Any, what: str) -> None:
    """``UnsupportedDtypeError`` if ``values`` (the reference's inputs, init inputs or
    outputs: ``what``) hold a tensor of a dtype the judge cannot judge: said before anything
    is derived from them, instead of a crash wherever such a tensor is first encoded."""
    found = unsupported_dtypes(values)
    if found:
        path, dtype = found[0]
        raise UnsupportedDtypeError(f"the reference's {what}{path}: {unsupported_message(dtype)}")


def _index_outputs(program: ReferenceProgram, outputs: list[Any]) -> dict[int, IndexOutput]:
    """The outputs an index op produced (``contract.match.index_outputs``), only where an
    output holds integers; none where the reference cannot be run to see (its integer
    outputs are then compared exactly, the stricter reading)."""
    from kernelgate.contract.match import index_outputs

    if all(
        not isinstance(o, torch.Tensor) or o.is_floating_point() or o.is_complex() for o in outputs
    ):
        return {}
    try:
        return index_outputs(program)
    except Exception:
        return {}


def output_spec(
    k: int,
    value: torch.Tensor,
    symbol: dict[tuple[int, int, int], str],
    indices: IndexOutput | None,
) -> OutputSpec:
    """Output ``k``'s record: its shape in dim names, dtype, and how it is compared
    (``oracle.output_kinds``): floating values by the error model, integers exactly, and the
    indices an index op produced (``indices``) by equivalence."""
    if value.is_floating_point() or value.is_complex():
        kind = OutputKind.VALUES
    else:
        kind = OutputKind.INDICES if indices is not None else OutputKind.EXACT
    return OutputSpec(
        name=f"out{k}",
        shape=[symbol.get((1, k, axis), size) for axis, size in enumerate(value.shape)],
        dtype=dtype_name(value.dtype),
        kind=kind,
        indices=indices if kind is OutputKind.INDICES else None,
    )


def derive_contract(program: ReferenceProgram) -> Contract:
    inputs = program.inputs(seed=42)
    require_supported_dtypes(inputs, "get_inputs()")
    model = program.build_model(program.init_inputs())
    prober = Prober(program, _numel(inputs))
    reference = prober.run({}, cpu=False, meta_seconds=META_SECONDS)
    prober.meta_runs = reference.outcome == PASSED
    # The model built on meta (not copied there: a forward that closes over a submodule,
    # minGPT's ``self.mlpf = lambda x: m.c_proj(...)``, keeps a copy's submodule on the CPU).
    if reference.meta_outputs is not None:
        outputs = reference.meta_outputs
    else:
        outputs, _ = shape_run(model, inputs, meta_seconds=0)
    require_supported_dtypes(outputs, "output")
    dims, symbol, unprobed = derive_dims(prober, model, inputs, outputs)
    indices = _index_outputs(program, outputs)

    # A second draw, for zero structure and integer domains: what both draws share is how
    # the reference builds its inputs, not chance.
    resampled = program.inputs(seed=STRUCTURE_SEED)
    shapes = {
        f"arg{i}": tuple(v.shape) for i, v in enumerate(inputs) if isinstance(v, torch.Tensor)
    }
    specs: list[TensorSpec | ScalarSpec] = []
    for i, value in enumerate(inputs):
        if isinstance(value, torch.Tensor):
            again = resampled[i] if i < len(resampled) else None
            samples = [value] + ([again] if isinstance(again, torch.Tensor) else [])
            floating = value.is_floating_point() or value.is_complex()
            others = {name: shape for name, shape in shapes.items() if name != f"arg{i}"}
            specs.append(
                TensorSpec(
                    name=f"arg{i}",
                    shape=[symbol.get((0, i, axis), size) for axis, size in enumerate(value.shape)],
                    dtypes=[dtype_name(value.dtype)],
                    integer_values=None if floating else "reference",
                    domain=None if floating else derive_domain(samples, others, dims),
                    structure=structure_of(samples),
                )
            )
        else:
            specs.append(ScalarSpec(name=f"arg{i}", value=value))
    out_specs = [
        output_spec(k, o, symbol, indices.get(k))
        for k, o in enumerate(outputs)
        if isinstance(o, torch.Tensor)
    ]
    return Contract(
        name=program.path.stem,
        dims=dims,
        inputs=specs,
        outputs=out_specs,
        postcondition=Postcondition(
            reference=str(program.path), error_model=ErrorModelSpec("ensemble")
        ),
        provenance=Provenance(
            source="derived",
            detail=f"derived from KernelBench reference {program.path.name} by rebinding its "
            f"module-level sizes ({', '.join(program.sizes) or 'none'}) to probe sizes and "
            "re-running it"
            + (
                f"; not probed within the time, so not varied: {', '.join(unprobed)}"
                if unprobed
                else ""
            ),
            reference_sha256=program.sha256,
        ),
    )


def contract_for(program: ReferenceProgram) -> Contract:
    """The contract a reference gets when none is given: its built-in library entry when the
    reference calls exactly that op (provenance ``library``), derived otherwise.

    The library contract is built on the derived one (the dims found by re-running the
    reference at other sizes), so both agree on shapes and differ in what they promise.
    """
    from kernelgate.contract.match import library_contract

    derived = derive_contract(program)
    return library_contract(program, derived) or derived
