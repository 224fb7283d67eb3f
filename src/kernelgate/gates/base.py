"""The shape every gate has, and the context gates run in.

A gate is a class with an ``id``, a ``kind`` (tolerance-free or thresholded), a ``title``
and a ``run(ctx)`` that returns a ``GateResult``. Gates never talk to the worker or the
oracle directly: ``GateContext`` builds seeded cases, runs the candidate (turning every
misbehaviour into a recorded incident) and evaluates the oracle, so each gate module holds
only its own judgement.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import shlex
import time
import zlib
from abc import ABC, abstractmethod
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import cached_property
from typing import Any, ClassVar, NoReturn, TypeVar

import torch

from kernelgate.contract.spec import (
    Contract,
    ExceptionalPolicy,
    IndexOutput,
    OutputKind,
    OutputSpec,
)
from kernelgate.errors import CandidateBuildError, CandidateLoadError
from kernelgate.inputs.distributions import draw, fold_into_range, impose_structure
from kernelgate.inputs.host import to_host
from kernelgate.inputs.integers import draw_in_domain, index_bound
from kernelgate.inputs.placement import GUARD_BYTES, POISONS, PlacedTensor
from kernelgate.oracle import dependence
from kernelgate.oracle.compare import rounds_like_cpu
from kernelgate.oracle.error_models import (
    Assessment,
    admissible_error,
    assess_ensemble,
    assess_with,
    uses_magnitude,
)
from kernelgate.oracle.fp64 import (
    Oracle,
    SizedOracle,
    cast_values,
    flatten_outputs,
    inputs_on_device,
)
from kernelgate.oracle.fp64 import held as held_on
from kernelgate.oracle.output_kinds import assess_exact, assess_indices, output_kind
from kernelgate.sandbox import cuda_ipc
from kernelgate.sandbox.access_trace import AccessLog
from kernelgate.sandbox.clocks import ChoicePoint
from kernelgate.sandbox.forbidden_watch import merge_uses
from kernelgate.sandbox.session import CallResult, ExecutionIncident, WorkerSession
from kernelgate.sandbox.wire import WireTensor, dtype_name
from kernelgate.serde import Serializable

_T = TypeVar("_T")


@contextlib.contextmanager
def traced(trace: Callable[[str], None] | None, name: str) -> Iterator[None]:
    """``name ...`` in ``trace`` as the block starts, ``name <seconds> s`` as it ends (nothing
    without a trace): the judge log's format, which benchmarks/audit_time_split.py reads."""
    if trace is None:
        yield
        return
    trace(f"{name} ...")
    started = time.monotonic()
    try:
        yield
    finally:
        trace(f"{name} {time.monotonic() - started:.1f} s")


# Cases whose oracle results a GateContext keeps within a gate whatever their size (see
# ``_cached``), and the bytes of results (with the inputs they are of) it keeps beyond those
# and across gates: a case another gate judges again (ORD-02 judges the main worker's first
# call, CMP-01's first case) is then not evaluated again, while at KernelBench sizes, where
# one case's float64 results alone exceed it, nothing is held from gate to gate.
RECENT_CASES = 4
RESULTS_KEPT_BYTES = 256 << 20
# Bytes of those results a GateContext keeps on the oracle's device (``fp64.results_device``:
# they are judged there, against the candidate's output, which arrives there), all held
# cases together. A result that would take them past it is kept on the host, as every
# result was before, and so is every result held when the device runs out of memory: an
# audit's judges share one GPU, and a verdict must not depend on what the others hold.
# Twelve judges at this budget hold 24 GiB of an H200's 141 at most. The magnitudes are
# outside it: they stayed on the device before the other results did (contract/match.py),
# and bringing KernelBench-sized ones down and up again is the cost this avoids.
RESULTS_DEVICE_KEPT_BYTES = 2 << 30
OUTSIDE_DEVICE_BUDGET = frozenset({"magnitude"})
# Results computed on the host (the CPU honest runs, ``Oracle.second_implementations``) that
# the judge uploads once and keeps beside the others within that budget: every judgement
# that read them uploaded them again (``_assess_on``, the class gates).
COMPUTED_ON_HOST = frozenset({"honest:cpu-fp32", "honest:cpu-fp64"})
# Bytes of the copies of cases' inputs a GateContext keeps on the oracle's device for the
# oracle's runs to read (``oracle_inputs``), all held cases together: a budget of their
# own, so that keeping them never pushes a result off the device. A case whose inputs
# would pass it is read from the host, uploaded for every run, as before. In their own
# dtypes they are half the size of the float64 results at most of the same elements; a
# KernelBench-sized case above it is one whose runs each take seconds on the device, so
# the upload it saves matters least there.
INPUTS_DEVICE_KEPT_BYTES = 1 << 30
# Oracles at other sizes (CMP-03) a GateContext keeps: each holds the reference model in
# float64 and in its own dtype, and a gate judges one shape at a time, so older ones would
# only hold device memory (for a large model, a copy of it for every held-out shape).
SIZED_ORACLES_KEPT = 2
# The main instance's first call is kept for ORD-02 (``GateContext.first_call``) while its
# inputs and outputs together take at most this many bytes; above it ORD-02 starts one more
# fresh instance instead of holding KernelBench-sized tensors for the whole verification.
FIRST_CALL_KEPT_BYTES = 64 << 20


class GateKind(StrEnum):
    EXACT = "tolerance-free"
    THRESHOLDED = "thresholded"


class Status(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    SKIPPED = "skipped"


@dataclass
class Counterexample(Serializable):
    """Everything needed to see and replay one failure."""

    case: str
    seed: int
    inputs: list[dict[str, Any]]
    findings: list[dict[str, Any]]
    replay: str
    # The ``kernelgate verify ... --only G --seed S`` command that re-runs the whole gate;
    # set where ``replay`` became ``kernelgate replay EVIDENCE --gate G`` (an evidence file
    # was written: cli.py), None otherwise (``replay`` is that command then).
    verify: str | None = None
    # The failing case reduced along the contract's dims and values (``kernelgate.shrink``),
    # or None: not shrunk (turned off, a gate without a single-case judgement, ...).
    shrunk: dict[str, Any] | None = None


@dataclass
class GateResult(Serializable):
    id: str
    kind: GateKind
    title: str
    status: Status
    reason: str
    counterexample: Counterexample | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass
class Case:
    """One set of logical inputs for one candidate call, reproducible from ``seed``."""

    label: str
    seed: int
    values: list[Any]
    # CMP-03: module-level sizes rebound for this case (None: the reference's own), and the
    # init inputs ModelNew must be rebuilt with when they differ from the reference's.
    sizes: dict[str, int] | None = None
    init_inputs: list[Any] | None = None

    @property
    def sizes_key(self) -> str | None:
        if not self.sizes:
            return None
        return ",".join(f"{name}={value}" for name, value in sorted(self.sizes.items()))

    def describe(self) -> list[dict[str, Any]]:
        return [
            {"shape": list(v.shape), "dtype": dtype_name(v.dtype)}
            if isinstance(v, torch.Tensor)
            else {"value": repr(v)}
            for v in self.values
        ]


@dataclass
class _CaseResults:
    """The oracle results of one case's admitted values (``GateContext._cached``)."""

    values: list[Any]  # held, so that the id keying them is never reused
    entries: dict[str, Any] = field(default_factory=dict)
    nbytes: int = 0  # the values' tensors and every entry's, together
    # entries kept on the host although the oracle keeps its results on its device, and why
    # (over RESULTS_DEVICE_KEPT_BYTES, or the device out of memory): said in assessments
    on_host: dict[str, str] = field(default_factory=dict)
    # the values on the oracle's device, uploaded once for all of the case's oracle runs
    # (``GateContext.oracle_inputs``), and their bytes (INPUTS_DEVICE_KEPT_BYTES)
    device_inputs: list[Any] | None = None
    device_input_bytes: int = 0
    # why the runs read the host values instead (over the budget, the device out of
    # memory); None while no run has asked, or the copy is held
    inputs_on_host: str | None = None


def _tensor_bytes(
    value: Any, seen: set[tuple[str, int]] | None = None, *, device_only: bool = False
) -> int:
    """Bytes of the tensor storages in ``value`` (lists, tuples, dicts and plain objects
    walked, each once, so a structure that refers back to itself ends), each storage
    counted once; ``device_only``: only those on a device (not the host)."""
    seen = set() if seen is None else seen
    if isinstance(value, torch.Tensor):
        storage = ("storage", value.untyped_storage().data_ptr())
        if storage in seen or value.device.type == "meta":
            return 0
        if device_only and value.device.type == "cpu":
            return 0
        seen.add(storage)
        return value.untyped_storage().nbytes()
    if ("object", id(value)) in seen:
        return 0
    seen.add(("object", id(value)))
    if isinstance(value, list | tuple):
        return sum(_tensor_bytes(v, seen, device_only=device_only) for v in value)
    if isinstance(value, dict):
        return sum(_tensor_bytes(v, seen, device_only=device_only) for v in value.values())
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return sum(_tensor_bytes(v, seen, device_only=device_only) for v in vars(value).values())
    return 0


def _on_host(value: Any) -> Any:
    """``value`` with every tensor in it on the host (lists, tuples, dicts and dataclasses,
    such as ``OpenSigns``, rebuilt around them): an oracle result the judge stops keeping
    on the device. Device tensors come over pinned (``inputs/host.py``), once each."""
    if isinstance(value, torch.Tensor):
        return value if value.device.type == "cpu" else to_host(value)
    if isinstance(value, list | tuple):
        return type(value)(_on_host(v) for v in value)
    if isinstance(value, dict):
        return {k: _on_host(v) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {f.name: _on_host(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return dataclasses.replace(value, **fields)
    return value


@dataclass
class Run:
    """A case as it was placed, sent and answered."""

    case: Case
    placed: list[Any]
    result: CallResult

    @cached_property
    def outputs(self) -> list[Any]:
        """Flat list of outputs: logical views for tensors (on the device when they came by
        IPC handle, on the host when as bytes: ``WorkerSession.data_path``), raw values
        otherwise."""
        return [o.view() if isinstance(o, WireTensor) else o for o in self.raw_outputs]

    @cached_property
    def raw_outputs(self) -> list[Any]:
        return flatten_outputs(self.result.outputs)

    def input_descriptions(self) -> list[dict[str, Any]]:
        return [
            p.describe() if isinstance(p, PlacedTensor) else {"value": repr(p)} for p in self.placed
        ]


class GateAborted(Exception):
    """The candidate misbehaved during this gate's run; RES-01 reports the incident."""


@dataclass
class Incident(Serializable):
    gate: str
    case: str
    seed: int
    kind: str
    detail: str
    log_tail: str = ""
    # Set by a domain gate (CMP-02/03) when the incident happened at a layout or shape that
    # a narrowed verdict excludes: a clean refusal outside the verified sub-domain.
    domain_point: str | None = None
    # Set with ``domain_point`` by CMP-02 when the incident was a fault (a device fault, a
    # fault signal) at a layout the reference's inputs never have: the fault, named
    # (``domain.fault_of``), a precondition the candidate does not guard.
    unguarded_precondition: str | None = None


class GateContext:
    """What a gate may use: the contract, seeded cases, the candidate, the oracle."""

    def __init__(
        self,
        *,
        contract: Contract,
        oracle: Oracle,
        session: WorkerSession,
        seed: int,
        replay: list[str],
        sanitize: bool = False,
        trace: Callable[[str], None] | None = None,
    ) -> None:
        self.contract = contract
        # one line at the start and at the end of each oracle evaluation and candidate call:
        # where a slow judge spends its time (the audit's judge.log); None traces nothing
        self.trace = trace
        self.gate_id = ""  # the gate now running, for the trace (set by ``verify``)
        self.sanitize = sanitize  # RES-01 also runs compute-sanitizer (device mode)
        self.oracle = oracle
        self.session = session
        self.seed = seed
        self.replay_argv = replay
        # A replay (``kernelgate.replay``) focused on one stored case per gate: gate id ->
        # that case's label. A gate with independent cases skips the others
        # (``focused_out``); their seeds stay what they were, since each is drawn by index.
        self.focus: dict[str, str] = {}
        # The case of every failure (gate id, label, seed), kept only when the failures
        # will be shrunk after the gates (``kernelgate.shrink``): its values as judged.
        self.keep_failing_cases = False
        self.failing_cases: dict[tuple[str, str, int], Case] = {}
        self.incidents: list[Incident] = []
        # every traced call's loads and stores under the interpreter, for RES-01
        self.access = AccessLog()
        self.halted: str | None = None  # set after a hang: later gates are not run
        # oracle results per case's admitted values (keyed by the id of that list, least
        # recently used first): "expected", "magnitude", "open-zero-signs" and one
        # "honest:<run>" per honest run (see ``_cached``)
        self._results: OrderedDict[int, _CaseResults] = OrderedDict()
        # read once: the oracle's runs read a device copy of each case's inputs
        # (``oracle_inputs``) throughout one verification, or never
        self._inputs_on_device = inputs_on_device(oracle.device)
        # the reference's output dtypes per input signature (``output_dtypes``)
        self._output_dtypes: dict[tuple[Any, ...], list[torch.dtype | None]] = {}
        # how many times each kind of oracle result was computed (not taken from the
        # cache): what a verification cost, and what a test asserts is not repeated
        self.evaluations: Counter[str] = Counter()
        self._sized_oracles: OrderedDict[str, Oracle] = OrderedDict()
        # The main worker's first call, placed plainly (no layout, no other sizes): what a
        # fresh process answers first, for ORD-02 to compare with later calls and with other
        # fresh instances on the same input (None: not kept, see FIRST_CALL_KEPT_BYTES).
        self.first_call: Run | None = None
        self._spare: WorkerSession | None = None  # a worker started ahead (``fresh_instance``)
        # what confined each fresh instance's worker (sandbox/confine.py), for the verdict
        self.isolations: list[dict[str, Any]] = []
        # what each fresh instance spent on building (``WorkerSession.compile_paid``)
        self.fresh_compile_paid: list[dict[str, Any]] = []
        # AUTH-01 (sandbox/authorship.py): the worker's raw record of the profiled call
        # (``profile_authorship``), or why there is none
        self.authorship_record: Any = None
        self.authorship_why: str | None = "no call was profiled"

    # -- cases ----------------------------------------------------------------------------
    def case_seed(self, gate_id: str, index: int) -> int:
        return zlib.crc32(f"{gate_id}/{index}/{self.seed}".encode())

    @cached_property
    def template(self) -> list[Any]:
        """The reference's own ``get_inputs()`` (KernelBench seeding): shapes, dtypes, ints."""
        return self.oracle.program.inputs(seed=42)

    def drawn_case(
        self,
        label: str,
        seed: int,
        distribution: str = "normal",
        dtype: torch.dtype | list[torch.dtype | None] | None = None,
        replaced: frozenset[int] | set[int] = frozenset(),
    ) -> Case:
        """Floating inputs drawn from ``distribution`` (in ``dtype``, or each input's own;
        a list gives one per input, None keeping that input's own); other inputs as the
        reference makes them. Inputs in ``replaced`` keep the reference's own values: the
        caller puts its own there (EXC-02's subnormals), and a draw at KernelBench's sizes
        is seconds of host time thrown away.

        Value ranges are applied later, once, by ``admit`` (every case passes through it).
        """
        dtypes = dtype if isinstance(dtype, list) else [dtype] * len(self.template)
        values = [
            v
            if i in replaced
            else self.draw(distribution, seed + i, tuple(v.shape), dtypes[i] or v.dtype)
            if isinstance(v, torch.Tensor) and v.is_floating_point()
            else self.draw_integers(i, seed + i, v, self.template)
            for i, v in enumerate(self.template)
        ]
        return Case(label, seed, values)

    def draw_integers(
        self,
        index: int,
        seed: int,
        value: Any,
        template: list[Any],
        sizes: dict[str, int] | None = None,
    ) -> Any:
        """Input ``index`` when it is not floating: drawn inside the contract's domain for it
        (``inputs.integers``), shaped like ``value`` (the reference's own draw in
        ``template``, its ``get_inputs()`` at the case's ``sizes``: None for the reference's
        own); the reference's values themselves where the contract records no domain.

        At other sizes (CMP-03) the range is the one the reference's draw at those sizes
        shows, narrowed by the contract's ``index_into`` there: the contract's own range was
        seen at the reference's sizes, and an index into a smaller table must shrink with it.
        """
        if not isinstance(value, torch.Tensor):
            return value
        specs = self.contract.inputs
        spec = specs[index] if index < len(specs) else None
        domain = getattr(spec, "domain", None)
        if domain is None:
            return value.clone()
        upper = None
        if sizes is not None and not domain.any and value.numel():
            shapes = {
                f"arg{j}": tuple(t.shape)
                for j, t in enumerate(template)
                if isinstance(t, torch.Tensor)
            }
            named = {dim.name: dim.reference for dim in self.contract.dims} | sizes
            upper = index_bound(domain, shapes, named)
            wide = value.to(torch.int64)
            domain = replace(domain, min=int(wide.min()), max=int(wide.max()))
        return draw_in_domain(domain, seed, value, upper)

    def draw(
        self, distribution: str, seed: int, shape: tuple[int, ...], dtype: torch.dtype
    ) -> torch.Tensor:
        """A seeded draw (CPU tensor), made on the oracle's device (see ``draw``)."""
        return draw(distribution, seed, shape, dtype, self.oracle.device)

    def conform(self, index: int, values: torch.Tensor) -> torch.Tensor:
        """Generated values of input ``index`` admitted to the contract's domain: folded into
        its value range and given its zero structure, where it has them."""
        specs = self.contract.inputs
        spec = specs[index] if index < len(specs) else None
        if not values.is_floating_point():
            return values
        value_range = getattr(spec, "value_range", None)
        if value_range:
            values = fold_into_range(values, *value_range)
        return impose_structure(values, getattr(spec, "structure", None))

    def sized_case(
        self, label: str, seed: int, sizes: dict[str, int], distribution: str = "normal"
    ) -> Case:
        """A case at other module-level sizes (CMP-03): the reference's ``get_inputs`` and
        ``get_init_inputs`` are called again with ``sizes`` rebound (KernelBench seeding)."""
        program = self.oracle.program
        with program.rebound(**sizes):
            template = program.inputs(seed=42)
            init_inputs = program.init_inputs()
        values = [
            self.draw(distribution, seed + i, tuple(v.shape), v.dtype)
            if isinstance(v, torch.Tensor) and v.is_floating_point()
            else self.draw_integers(i, seed + i, v, template, dict(sizes))
            for i, v in enumerate(template)
        ]
        same_init = _same_values(init_inputs, self.oracle.init_inputs)
        return Case(label, seed, values, dict(sizes), None if same_init else init_inputs)

    def oracle_for(self, case: Case) -> Oracle:
        """The oracle that judges ``case``: the reference's, or one at the case's sizes."""
        key = case.sizes_key
        if key is None:
            return self.oracle
        if key in self._sized_oracles:
            self._sized_oracles.move_to_end(key)
            return self._sized_oracles[key]
        while len(self._sized_oracles) >= SIZED_ORACLES_KEPT:  # rebuilt alike if asked again
            self._sized_oracles.popitem(last=False)
        with self.step("oracle built", case):
            oracle = SizedOracle(
                self.oracle.program, self.oracle.device, sizes=dict(case.sizes or {})
            )
        self._sized_oracles[key] = oracle
        return oracle

    def step(self, what: str, case: Case) -> contextlib.AbstractContextManager[None]:
        """Trace ``what`` for ``case`` (see ``trace``): a started line, then its seconds."""
        return traced(self.trace, f"{self.gate_id} {what} [{case.label}]")

    def focused_out(self, gate_id: str, label: str) -> bool:
        """Whether a replay focused on another case of ``gate_id`` skips case ``label``."""
        wanted = self.focus.get(gate_id)
        return wanted is not None and label != wanted

    def replay(self, gate_id: str) -> str:
        return shlex.join([*self.replay_argv, "--only", gate_id, "--seed", str(self.seed)])

    # -- evaluation -----------------------------------------------------------------------
    def admit(self, case: Case) -> Case:
        """Fold ``case``'s inputs into the contract's value ranges, once per values list.

        Gates build or replace ``case.values`` freely; ``run``, ``expected``, ``honest`` and
        ``magnitude`` all pass through here first, so the candidate and the oracle always see
        the same admitted values, whichever gate made them.
        """
        if getattr(case, "_admitted", None) is not case.values:
            case.values = [
                self.conform(i, v) if isinstance(v, torch.Tensor) else v
                for i, v in enumerate(case.values)
            ]
            case._admitted = case.values  # type: ignore[attr-defined]
        return case

    def expected(self, case: Case) -> list[Any]:
        self.admit(case)
        oracle = self.oracle_for(case)
        return self._cached(case, "expected", lambda: oracle.expected(self.oracle_inputs(case)))

    def oracle_inputs(self, case: Case) -> list[Any]:
        """``case``'s admitted values as the oracle's runs read them: a copy on the
        oracle's device, made once per case (one upload a tensor) and kept with its results
        (``_CaseResults``: let go with them, spilled with them), where the oracle runs on a
        device (``fp64.inputs_on_device``); else the values themselves, uploaded by each run
        as before (the CPU: always; a case whose inputs alone pass
        ``INPUTS_DEVICE_KEPT_BYTES``; a case whose copy a shortage of device memory let go,
        ``spill``).

        Within the budget, the copies of the least recently used cases are let go to make
        room (``_room_for_copy``): a gate evaluates one case at a time, and a case asked for
        again after its copy went is uploaded again, never judged otherwise. The copies are
        not counted in ``RESULTS_KEPT_BYTES`` (the case's host values are, and they are the
        same bytes), so what is carried from gate to gate is what it was without them.

        Called inside each evaluation (never held across one), so an evaluation made again
        after a spill reads the host values. No run writes into the copy: each casts or
        clones it (``fp64.run_copies``). It is the judge's own: never placed, sent or
        exported to the candidate's worker (``run`` places ``case.values``)."""
        self.admit(case)
        if not self._inputs_on_device:
            return case.values
        held = self._holder(case)
        if held.device_inputs is None and held.inputs_on_host is None:
            size = _tensor_bytes(case.values)
            if size > INPUTS_DEVICE_KEPT_BYTES:
                held.inputs_on_host = (
                    f"host: over the device budget for input copies "
                    f"({INPUTS_DEVICE_KEPT_BYTES >> 20} MiB a judge; {size >> 20} MiB asked)"
                )
                return case.values
            self._room_for_copy(INPUTS_DEVICE_KEPT_BYTES - size)
            held.device_inputs = cast_values(case.values, None, self.oracle.device)
            held.device_input_bytes = size
        return case.values if held.device_inputs is None else held.device_inputs

    def _room_for_copy(self, room: int) -> None:
        """Let go of input copies, least recently used case first, until those held take
        at most ``room`` bytes (``oracle_inputs``)."""
        for held in self._results.values():  # least recently used first
            if self.device_input_bytes_held() <= room:
                return
            held.device_inputs, held.device_input_bytes = None, 0

    def device_input_bytes_held(self) -> int:
        """Bytes of the cases' input copies this context keeps on the oracle's device
        (``oracle_inputs``), all cases together: within ``INPUTS_DEVICE_KEPT_BYTES``."""
        return sum(held.device_input_bytes for held in self._results.values())

    def _holder(self, case: Case) -> _CaseResults:
        """The results held for ``case``'s admitted values (made empty if none), now the
        most recently used."""
        key = id(case.values)
        held = self._results.get(key)
        if held is None:
            held = self._results[key] = _CaseResults(case.values)
            held.nbytes = _tensor_bytes(case.values)
        else:
            self._results.move_to_end(key)
        return held

    def _cached(self, case: Case, what: str, compute: Callable[[], Any]) -> Any:
        """``compute()`` once per case's admitted values and ``what``.

        Keyed by the admitted values list itself (``admit`` makes a new one whenever a gate
        replaces the values), so a case another gate judges again, the same ``Case``
        (ORD-02 takes the main worker's first call), is found; a case with new values never
        finds another's results. The ``RECENT_CASES`` latest cases are kept whatever their
        size (a gate asks for a case's results right after running it, and ORD-02
        interleaves two inputs); older ones are let go, least recently used first, while
        all together take more than ``RESULTS_KEPT_BYTES``: holding every float64 result of
        a gate took 2x the judge's memory at KernelBench sizes. An entry asked for again
        after that is recomputed, never wrong.
        """
        held = self._holder(case)
        if what not in held.entries:
            with self.step(what, case):
                held.entries[what] = self._kept(held, what, self._computed(compute))
            self.evaluations[what] += 1
            held.nbytes += _tensor_bytes(held.entries[what])
            self._let_go(keep=RECENT_CASES)
        return held.entries[what]

    def _computed(self, compute: Callable[[], _T]) -> _T:
        """``compute()``; where the device runs out of memory while this context keeps
        results there, those results go to the host (``spill``) and it is computed again:
        results kept on the device must never cost a verdict that the host would not.
        Without any to let go, the error stands, as it did before results stayed there."""
        try:
            return compute()
        except torch.OutOfMemoryError:
            if not self.spill("the device was out of memory"):
                raise
        return compute()

    def _kept(self, held: _CaseResults, what: str, value: Any) -> Any:
        """A new result ``value`` (entry ``what`` of ``held``) as it is kept: where the
        oracle computed it, unless that is a device and keeping it there would take this
        context's results on the device past ``RESULTS_DEVICE_KEPT_BYTES``; then on the
        host, and ``held`` says why (``assess`` reports it)."""
        if self.oracle.results_device.type == "cpu" or what in OUTSIDE_DEVICE_BUDGET:
            return value
        if what in COMPUTED_ON_HOST:
            return self._uploaded(held, what, value)
        incoming = _tensor_bytes(value, device_only=True)
        if not incoming or self.device_bytes_held() + incoming <= RESULTS_DEVICE_KEPT_BYTES:
            return value
        held.on_host[what] = (
            f"host: over the device budget for held results ({RESULTS_DEVICE_KEPT_BYTES >> 20} "
            f"MiB a judge; {incoming >> 20} MiB more asked)"
        )
        return _on_host(value)

    def _uploaded(self, held: _CaseResults, what: str, value: Any) -> Any:
        """A result computed on the host (``COMPUTED_ON_HOST``) kept on the results
        device, uploaded once, where it fits in ``RESULTS_DEVICE_KEPT_BYTES`` and the device
        has the memory; else on the host, where it is, and ``held`` says why (as a result
        computed on the device says it, ``_kept``)."""
        incoming = _tensor_bytes(value)
        if self.device_bytes_held() + incoming > RESULTS_DEVICE_KEPT_BYTES:
            held.on_host[what] = (
                f"host: over the device budget for held results ({RESULTS_DEVICE_KEPT_BYTES >> 20} "
                f"MiB a judge; {incoming >> 20} MiB more asked)"
            )
            return value
        try:
            return held_on(value, self.oracle.results_device)
        except torch.OutOfMemoryError:  # judged where it is: uploaded for each judgement
            held.on_host[what] = "host: the device was out of memory"
            return value

    def device_bytes_held(self) -> int:
        """Bytes of the oracle results this context keeps on a device within
        ``RESULTS_DEVICE_KEPT_BYTES`` (the magnitudes aside), all cases together."""
        entries = [
            value
            for held in self._results.values()
            for what, value in held.entries.items()
            if what not in OUTSIDE_DEVICE_BUDGET
        ]
        return _tensor_bytes(entries, device_only=True)

    def spill(self, reason: str) -> bool:
        """Move every oracle result kept on a device to the host (``reason`` recorded for
        ``assess``), let go of every case's input copy there (the host holds the same
        values: the case's later runs read those, ``oracle_inputs``), and give the freed
        blocks back to the driver: the device ran out of memory, and the judges of an audit
        share it. Whether anything moved or was let go; nothing is where results and inputs
        are kept on the host anyway (the CPU, or ``KERNELGATE_RESULTS_ON_DEVICE=0`` with
        ``KERNELGATE_INPUTS_ON_DEVICE=0``: the behaviour before either stayed there)."""
        if self.oracle.device.type == "cpu":
            return False
        moved = False
        for held in self._results.values():
            if held.device_inputs is not None:
                moved = True
            if held.inputs_on_host is None:  # not made again for this case
                held.inputs_on_host = f"host: {reason}"
            held.device_inputs, held.device_input_bytes = None, 0
        if self.oracle.results_device.type == "cpu":
            if moved and torch.cuda.is_available():
                torch.cuda.empty_cache()
            return moved
        for held in self._results.values():
            for what, value in held.entries.items():
                if _tensor_bytes(value, device_only=True):
                    held.entries[what] = _on_host(value)
                    held.on_host[what] = f"host: {reason}"
                    moved = True
        if moved and torch.cuda.is_available():
            torch.cuda.empty_cache()
        return moved

    def held_on_host(self, case: Case) -> dict[str, str]:
        """Which of ``case``'s oracle results are kept on the host though the oracle keeps
        them on its device, and why (empty: none, or results are kept on the host anyway)."""
        held = self._results.get(id(case.values))
        return dict(held.on_host) if held is not None else {}

    def _let_go(self, keep: int) -> None:
        """Drop the least recently used cases' results while those held take more than
        ``RESULTS_KEPT_BYTES``, never the ``keep`` most recent."""
        total = sum(held.nbytes for held in self._results.values())
        while len(self._results) > keep and total > RESULTS_KEPT_BYTES:
            _, dropped = self._results.popitem(last=False)
            total -= dropped.nbytes

    def native(self, case: Case) -> list[Any]:
        """The reference run eagerly in the inputs' own dtypes on the oracle's device: what
        output structure (count, shapes, dtypes) a candidate must match."""
        return self.honest(case, independent=False)["native-eager"]

    def output_dtypes(self, case: Case) -> list[torch.dtype | None]:
        """The reference's own output dtypes for ``case`` (None for a non-tensor output):
        what a candidate's outputs must match, beside the oracle's count and shapes.

        PyTorch's type promotion gives a result's dtype from its inputs' dtypes (and which
        of them are 0-dim), never from their values, so the native run that shows them is
        made once per input signature and sizes, not once per case: a gate whose bound
        holds without honest runs (``assess``) then makes none at all.
        """
        self.admit(case)
        signature = tuple(
            (v.dtype, v.dim() == 0) if isinstance(v, torch.Tensor) else repr(v) for v in case.values
        )
        key = (case.sizes_key, signature)
        if key not in self._output_dtypes:
            self._output_dtypes[key] = [
                o.dtype if isinstance(o, torch.Tensor) else None for o in self.native(case)
            ]
        return self._output_dtypes[key]

    def honest(self, case: Case, *, independent: bool | None = None) -> dict[str, list[Any]]:
        """Honest evaluations of the reference on ``case`` (``Oracle.second_implementations``).

        ``independent`` asks for the fp32 CPU run beside the native one; by default only the
        ensemble error model gets it.
        """
        if independent is None:
            independent = self.contract.postcondition.error_model.name == "ensemble"
        return self._honest_runs(case, "independent" if independent else "native")

    def honest_classes(self, case: Case) -> dict[str, list[Any]]:
        """Honest evaluations for the exact class gates (EXC-01/02, ``classes`` runs).

        Where PyTorch's own implementations disagree (the sign of relu(-0.0) is +0.0 on
        CUDA, -0.0 on the CPU) the reference defines nothing, and such positions are not
        judged: the native run and the reference on the CPU in float64 (a second
        implementation; fp32 subnormal inputs are normal there, which made the fp32 CPU run
        of a 4096-square matmul on them take minutes).
        """
        return self._honest_runs(case, "classes")

    def _honest_runs(self, case: Case, kind: str) -> dict[str, list[Any]]:
        """Each run computed once per case, whichever kinds ask for it."""
        self.admit(case)
        oracle = self.oracle_for(case)
        wanted = [("native-eager", None), *oracle.second_implementations(case.values, kind)]
        runs = {}
        for name, dtype in wanted:
            runs[name] = self._cached(
                case, f"honest:{name}", functools.partial(self._honest_run, oracle, case, dtype)
            )
        return runs

    def _honest_run(self, oracle: Oracle, case: Case, cpu_dtype: torch.dtype | None) -> list[Any]:
        """One honest run of ``case``: the native one from the inputs' device copy
        (``oracle_inputs``), a CPU one from the host values."""
        on_device = self.oracle_inputs(case) if cpu_dtype is None else None
        return oracle.honest_run(case.values, cpu_dtype, on_device)

    def open_zero_signs(self, case: Case) -> list[Any]:
        """Per output of ``case``, where the reference leaves the sign of a zero open (an
        ``OpenSigns``, or None: ``oracle/zero_sign.py``), for the exact class gates; up to
        three float64 evaluations, once per case, so a gate asks only where it could matter."""
        self.admit(case)
        dtypes = [o.dtype if isinstance(o, torch.Tensor) else None for o in self.native(case)]
        oracle, expected = self.oracle_for(case), self.expected(case)
        return self._cached(
            case,
            "open-zero-signs",
            lambda: oracle.open_zero_signs(self.oracle_inputs(case), expected, dtypes),
        )

    def has_second_implementation(self, case: Case, kind: str) -> bool:
        """Whether ``kind`` adds a run to ``native-eager`` for ``case`` (without running it)."""
        return bool(self.oracle_for(case).second_implementations(case.values, kind))

    def dependence_probe(self, case: Case) -> list[Any] | None:
        """The oracle's outputs with the positions that depend on none of the case's
        injected specials given their finite values, or None when the case's inputs hold
        no specials (``oracle/dependence.py`` says why and how). Like a second
        implementation it can only take positions out of judgement, and it is asked only
        where a candidate's class differs from the oracle's."""
        self.admit(case)
        if not dependence.has_specials(dependence.special_masks(case.values)):
            return None
        oracle = self.oracle_for(case)
        return self._cached(
            case,
            "dependence-probe",
            lambda: dependence.coarse_probe(
                self.oracle_inputs(case), oracle.expected, self.expected(case)
            ),
        )

    def refined_dependence_probe(
        self, case: Case, output_index: int, disputed: torch.Tensor
    ) -> list[Any] | None:
        """``dependence_probe`` with each ``disputed`` position of output ``output_index``
        given the oracle's value with only the specials it depends on kept; None when the
        case holds no specials or more than the refined probe's budget.

        The probe edits the inputs where the oracle's runs read them (``oracle_inputs``: its
        masks and edits lie on the device with the copy); where the device runs out of
        memory the results and copies held there are let go and it runs again from the host
        values (``_computed``), as it ran before the copies."""
        if self.dependence_probe(case) is None:
            return None

        def probe() -> list[Any] | None:
            coarse = self.dependence_probe(case)  # again: a spill moves it
            if coarse is None:
                return None
            refined = dependence.refined_probe(
                self.oracle_inputs(case),
                self.oracle_for(case).expected,
                output_index,
                disputed,
                coarse[output_index],
            )
            if refined is None:
                return None
            return [refined if k == output_index else out for k, out in enumerate(coarse)]

        return self._computed(probe)

    def completion_probes(
        self, case: Case, output_index: int, disputed: torch.Tensor, fallback: list[Any]
    ) -> list[list[Any]]:
        """Two more honest runs for the ``disputed`` positions of output ``output_index``:
        the oracle on the case with every input row a position does not depend on made
        positive, then negative (``oracle/dependence.py``: the completion); ``fallback``'s
        outputs elsewhere. Empty when over the completion's budget. Made again from the
        host values where the device runs out of memory (``refined_dependence_probe``)."""
        self.admit(case)
        alternatives = self._computed(
            lambda: dependence.completion_probe(
                self.oracle_inputs(case),
                self.oracle_for(case).expected,
                output_index,
                disputed,
                fallback[output_index],
            )
        )
        if alternatives is None:
            return []
        return [
            [alt if k == output_index else out for k, out in enumerate(fallback)]
            for alt in alternatives
        ]

    def judge_classes(
        self, case: Case, judge: Callable[[dict[str, list[Any]]], tuple[torch.Tensor, torch.Tensor]]
    ) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """``judge(honest runs) -> (judged positions, mismatches)`` for an exact class gate,
        asking the second implementation (``honest_classes``) only where it could matter.

        A second implementation can only exclude positions, never add a mismatch, so it is
        consulted only where the native run alone finds one. The flag says whether it was.
        """
        agree, bad = judge({"native-eager": self.native(case)})
        if bad.any() and self.has_second_implementation(case, "classes"):
            agree, bad = judge(self.honest_classes(case))
            return agree, bad, True
        return agree, bad, False

    def assess(self, case: Case, output_index: int, actual: torch.Tensor) -> Assessment:
        """Judge one candidate output of ``case`` under the contract's error model.

        Every thresholded gate goes through here, so the error model is chosen in one place.
        The model's per-element arithmetic (a dozen float64 passes) runs on the oracle's
        device: on the CPU it cost more than the candidate's own work at KernelBench sizes.
        The oracle's results are kept there (``fp64.results_device``), so nothing is
        uploaded for it. What comes back is scalars and a few positions, so nothing
        device-resident leaks out. Where the device has no memory left (an audit's judges
        share one GPU) the results held there go to the host and the same arithmetic runs
        on the CPU; the assessment says so (``judged_on``), and names every result of the
        case kept on the host and why (``oracle_results_held``).
        """
        expected = self.expected(case)[output_index]
        spec = self.output_spec(output_index)
        kind = output_kind(spec, expected)
        del expected  # held by the cache; a spill (device out of memory) can then free it
        if kind is OutputKind.EXACT:
            assessment = self._assess_exact(case, output_index, actual)
        elif kind is OutputKind.INDICES:
            assert spec is not None and spec.indices is not None  # output_kind checks it
            assessment = self._assess_indices(case, output_index, actual, spec.indices)
        else:
            assessment, on_cpu_instead = self._on_device_or_cpu(
                lambda device: self._assess_on(device, case, output_index, actual)
            )
            if on_cpu_instead:
                assessment.params["judged_on"] = "cpu (the device was out of memory)"
        if on_host := self.held_on_host(case):
            assessment.params["oracle_results_held"] = on_host
        return assessment

    def output_spec(self, output_index: int) -> OutputSpec | None:
        """The contract's record of output ``output_index`` (None: it has none)."""
        name = f"out{output_index}"
        return next((o for o in self.contract.outputs if o.name == name), None)

    def _assess_exact(self, case: Case, output_index: int, actual: torch.Tensor) -> Assessment:
        """An integer or bool output, exactly; the native run is asked only where the oracle
        alone finds a difference (it can only take positions out of judgement)."""
        expected = self.expected(case)[output_index]
        first = assess_exact(expected, actual)
        if first.passed:
            return first
        native = self.native(case)[output_index]
        return assess_exact(expected, actual, {"native-eager": native})

    def _assess_indices(
        self, case: Case, output_index: int, actual: torch.Tensor, spec: IndexOutput
    ) -> Assessment:
        """An index output by equivalence (``oracle.output_kinds.assess_indices``): the op's
        input from the float64 oracle and from the native run, once per case for all of the
        contract's index outputs."""
        wanted = {
            (o.indices.op, o.indices.call) for o in self.contract.outputs if o.indices is not None
        }
        oracle = self.oracle_for(case)
        sources = self._cached(
            case, "index-sources", lambda: oracle.op_inputs(self.oracle_inputs(case), wanted)
        )
        key = (spec.op, spec.call)
        if key not in sources:  # the op was not reached on these inputs: exact, and say so
            assessment = self._assess_exact(case, output_index, actual)
            assessment.params["indices"] = f"{spec.op} call {spec.call} not reached: judged exactly"
            return assessment
        native = self._cached(
            case,
            "index-sources:native",
            lambda: oracle.op_inputs(self.oracle_inputs(case), wanted, native=True),
        )
        expected = self.expected(case)[output_index]

        def compute(device: torch.device) -> Assessment:
            honest = {"native-eager": native[key].to(device)} if key in native else {}
            source = sources[key].to(device)
            return assess_indices(spec, expected.to(device), actual.to(device), source, honest)

        # where the sources are kept: the oracle's device, or the host (see ``_on_device_or_cpu``)
        assessment, on_cpu_instead = self._on_device_or_cpu(compute, sources[key].device)
        if on_cpu_instead:
            assessment.params["judged_on"] = "cpu (the device was out of memory)"
        return assessment

    def _on_device_or_cpu(
        self, compute: Callable[[torch.device], _T], device: torch.device | None = None
    ) -> tuple[_T, bool]:
        """``compute`` on ``device`` (the oracle's by default), or on the CPU where that
        device is out of memory (an audit's judges share one GPU); the flag says whether it
        fell back. ``compute`` must leave nothing behind but its result: a run cut short by
        the device's memory is made again whole."""
        device = self.oracle.device if device is None else device
        if device.type != "cpu":
            try:
                return compute(device), False
            except torch.OutOfMemoryError:
                # the results kept there go to the host first: the CPU's run reads them there
                if not self.spill("the device was out of memory"):
                    torch.cuda.empty_cache()
            return compute(torch.device("cpu")), True
        return compute(device), False

    def _magnitude_of(self, case: Case, output_index: int) -> tuple[torch.Tensor | None, int]:
        """The library entry's magnitude of one output (None: none) and the length N."""
        magnitudes, n = self.magnitude(case)
        scale = magnitudes[output_index] if output_index < len(magnitudes) else None
        return (scale if isinstance(scale, torch.Tensor) else None), n

    def _assess_on(
        self, device: torch.device, case: Case, output_index: int, actual: torch.Tensor
    ) -> Assessment:
        def on(value: Any) -> Any:
            return value.to(device) if isinstance(value, torch.Tensor) else value

        expected = on(self.expected(case)[output_index])
        actual = on(actual)
        spec = self.contract.postcondition.error_model
        if spec.name == "ensemble":
            # More honest runs only widen the bound (the worst honest error is a maximum)
            # and shrink the judged positions, so a pass on the native run alone is a pass
            # on all of them: the CPU run (a full KernelBench-sized forward) is made only
            # when that verdict could change.
            native = {"native-eager": on(self.native(case)[output_index])}
            first = assess_ensemble(expected, actual, native)
            if not self.has_second_implementation(case, "independent"):
                return first
            if first.passed:
                first.params["independent_runs"] = (
                    "not run: the bound from native-eager alone already holds, and more "
                    "honest runs can only widen it"
                )
                return first
            honest = {name: on(runs[output_index]) for name, runs in self.honest(case).items()}
            return assess_ensemble(expected, actual, honest)
        magnitude, n = self._magnitude_of(case, output_index)
        magnitude = on(magnitude)
        # Under the elementwise and order models honest runs only take positions out of
        # judgement (an honest overflow) and raise the bound (the order model's honest
        # floor), so a pass without them is a pass with them: the native run (a full
        # KernelBench-sized forward) is made only when the bound is in question.
        first = assess_with(spec.name, spec.params, expected, actual, {}, magnitude=magnitude, n=n)
        if first.passed:
            first.params["honest_runs"] = (
                "not run: the bound holds without them, and honest runs can only exclude "
                "positions or raise the bound"
            )
            return first
        honest = {name: on(runs[output_index]) for name, runs in self.honest(case).items()}
        return assess_with(
            spec.name, spec.params, expected, actual, honest, magnitude=magnitude, n=n
        )

    def admissible(self, case: Case, output_index: int, out_dtype: torch.dtype) -> torch.Tensor:
        """Per element (float64), how far an honest output may lie from the exact one under
        the contract's error model (``error_models.admissible_error``); EXC-02 judges
        classes only where this cannot move a value across a class or sign boundary. On the
        device it was computed on: the oracle's, or the CPU where that one was full."""
        spec = self.contract.postcondition.error_model
        magnitude, n = self._magnitude_of(case, output_index)  # (None, 1) without an entry
        expected = self.expected(case)[output_index]
        native = self.native(case)[output_index]

        def compute(device: torch.device) -> torch.Tensor:
            return admissible_error(
                spec.name,
                spec.params,
                expected.to(device),
                out_dtype,
                {"native-eager": native.to(device)},
                magnitude=None if magnitude is None else magnitude.to(device),
                n=n,
            )

        return self._on_device_or_cpu(compute)[0]

    def class_judging_device(self, dtype: torch.dtype) -> torch.device:
        """Where the exact class gates (EXC-01/02) judge outputs of ``dtype``.

        On the oracle's device when it rounds float64 to ``dtype`` bit for bit as the CPU
        does (``compare.rounds_like_cpu``, asked once per dtype): the candidate's output
        already lies there, and the dozen passes over every output position that judging
        takes cost milliseconds there against tens of seconds on a host shared by an
        audit's judges. Else on the CPU, as before.
        """
        device = self.oracle.device
        if device.type != "cpu" and rounds_like_cpu(str(device), dtype):
            return device
        return torch.device("cpu")

    def on_class_judging_device(
        self, dtype: torch.dtype, compute: Callable[[torch.device], _T]
    ) -> _T:
        """``compute`` on ``class_judging_device(dtype)``, again on the CPU where that device
        is out of memory (``_on_device_or_cpu``)."""
        return self._on_device_or_cpu(compute, self.class_judging_device(dtype))[0]

    def forget_cases(self) -> None:
        """Between gates: keep earlier cases' oracle results only within
        ``RESULTS_KEPT_BYTES``, the most recent first.

        Cases are mostly seeded per gate, but ORD-02 judges CMP-01's first case again;
        keeping every result held every fp64 result of a verification at once (a
        4M-element RMSNorm's judge peaked at 3.65 GB with them, 1.65 GB without), so above
        the byte budget none is carried into the next gate.
        """
        self._let_go(keep=0)
        if self.oracle.device.type == "cuda":
            torch.cuda.empty_cache()  # the judges of an audit share the GPU: give back blocks

    def magnitude(self, case: Case) -> tuple[list[Any], int]:
        """The library entry's magnitudes (per output) and reduction length N for ``case``.

        Used by the ``order`` error model and by ``elementwise`` with a magnitude recipe;
        ``([], 1)`` when the contract names no library entry or its error model does not
        read the magnitude (``error_models.uses_magnitude``): the run costs as much as the
        oracle's own evaluation and would change nothing.
        """
        spec = self.contract.postcondition.error_model
        entry_name = spec.params.get("entry")
        if not entry_name or not uses_magnitude(spec.name, spec.params):
            return [], 1
        self.admit(case)
        oracle = self.oracle_for(case)

        def compute() -> tuple[list[Any], int]:
            with oracle.program.rebound(**(case.sizes or {})):
                return oracle.magnitude(self.oracle_inputs(case), str(entry_name))

        return self._cached(case, "magnitude", compute)

    @staticmethod
    def placement_device(session: WorkerSession) -> str | None:
        """Where the judge places the inputs it sends ``session``: the device on the CUDA
        IPC path (its storages are staged device to device, and what comes back lies there
        too), the host otherwise (None)."""
        return session.device if session.data_path == cuda_ipc.IPC else None

    def run(
        self,
        gate_id: str,
        case: Case,
        *,
        poison: int = POISONS[0],
        hold_bytes: int = 0,
        reuse_inputs: bool = False,
        place: Any = None,
        side_effects: bool = False,
        session: WorkerSession | None = None,
    ) -> Run:
        """Place ``case`` in guarded storages and run the candidate on it once.

        ``side_effects`` brings back the inputs after the call and the call's allocations
        (see ``WorkerSession.call``); only MEM-01 judges them. ``session``: a fresh instance
        (``fresh_instance``) instead of the main one.
        """
        session = session or self.session
        self.admit(case)
        where = self.placement_device(session)
        placer = place or (lambda v: PlacedTensor.place(v, poison=poison, device=where))
        placed = [placer(v) if isinstance(v, torch.Tensor) else v for v in case.values]
        wire_inputs = [p.as_wire() if isinstance(p, PlacedTensor) else p for p in placed]
        try:
            # ModelNew built for this case's sizes (CMP-03), or the original one otherwise.
            if case.init_inputs is None:
                session.use_init(None, None)
            else:
                with self.step("candidate built", case):
                    session.use_init(case.init_inputs, case.sizes_key)
            with self.step("candidate", case):
                result = session.call(
                    wire_inputs,
                    poison=poison,
                    guard_bytes=GUARD_BYTES,
                    hold_bytes=hold_bytes,
                    reuse_inputs=reuse_inputs,
                    side_effects=side_effects,
                )
        except ExecutionIncident as incident:
            label = case.label
            if session is not self.session:
                label += f", fresh instance (clock mode {session.clock_mode})"
            self._incident(gate_id, label, case.seed, incident)
        self.access.add(gate_id, case.label, case.seed, result.access)
        run = Run(case, placed, result)
        plain = place is None and not (hold_bytes or reuse_inputs) and case.init_inputs is None
        if session is self.session and session.calls_since_start == 1 and plain:
            self._keep_first_call(run)
        return run

    def profile_authorship(self) -> None:
        """Profile one more call of the main instance, on CMP-01's first case drawn again
        with a seed of its own, for AUTH-01 (sandbox/authorship.py). ``verify`` calls it once
        the gates are done: the worker is warm (its kernels compiled and autotuned), and no
        judged call comes after it, so a candidate whose state counts its calls is judged
        exactly as without it. Not a gate's call: a failure is the measurement's, said in
        ``authorship_why``, never an incident."""
        if self.halted is not None:
            self.authorship_why = f"not profiled: {self.halted}"
            return
        case = self.admit(self.drawn_case("authorship", self.case_seed("AUTH-01", 0)))
        self.gate_id = "AUTH-01"  # for the trace
        try:
            self.session.use_init(None, None)  # the model as the reference's sizes build it
            with self.step("authorship profile", case):
                self.authorship_record = self.session.profile_authorship(list(case.values))
            self.authorship_why = None
        except (ExecutionIncident, CandidateLoadError) as exc:
            self.authorship_why = f"the profiled call failed: {str(exc)[:300]}"

    def _keep_first_call(self, run: Run) -> None:
        """Keep the main worker's first call (see ``first_call``) where it is small enough."""
        held = sum(p.storage.nbytes for p in run.placed if isinstance(p, PlacedTensor))
        held += sum(o.nbytes for o in run.raw_outputs if isinstance(o, WireTensor))
        self.first_call = run if held <= FIRST_CALL_KEPT_BYTES else None

    def _incident(
        self, gate_id: str, label: str, seed: int, incident: ExecutionIncident
    ) -> NoReturn:
        """Record ``incident`` for RES-01 and abort the gate (a hang halts the pipeline)."""
        self.incidents.append(
            Incident(
                gate_id, label, seed, incident.kind, incident.detail, incident.log_tail[-2000:]
            )
        )
        if incident.kind == "timeout":
            self.halted = f"candidate hung in {gate_id} ({label})"
        raise GateAborted(str(incident)) from None

    @contextlib.contextmanager
    def fresh_instance(
        self, gate_id: str, clock_mode: str = "real", *, prefetch: bool = False
    ) -> Iterator[WorkerSession]:
        """A new worker with the same candidate and init inputs, closed after use.

        For what one long-lived instance cannot show: a candidate's first call (ORD-02) and
        the choices it makes by the clocks (CMP-01, ``clock_mode``: see sandbox/clocks.py).
        A load failure or misbehaviour is an incident, as in the main instance; the kernels
        it launched join the main session's, so RES-02 judges every config exercised.
        ``prefetch``: another fresh instance follows, so its worker starts up (imports torch
        and Triton) now, beside this one; it waits unloaded until then, or until the gate ends.
        """
        session = self._spare or self._new_session()
        self._spare = None
        session.clock_mode = clock_mode
        if prefetch:
            self.prefetch_instance()
        label = f"fresh instance (clock mode {clock_mode})"
        session.compile_context = f"{gate_id} {label}"
        try:
            if self.trace is not None:
                self.trace(f"{self.gate_id} {label} starting ...")
            try:
                session.start()
            except CandidateBuildError:
                raise  # a build that failed or ran out of budget: the load stage's result
            except CandidateLoadError as exc:
                self._incident(gate_id, label, 0, ExecutionIncident("exception", str(exc)))
            yield session
        finally:
            self.session.kernels.extend(session.kernels)
            merge_uses(self.session.forbidden_uses, session.forbidden_uses)
            self.fresh_compile_paid.extend(session.compile_paid)
            session.close(wait=False)  # its exit overlaps the next gate (settled by verify)
            session.__exit__(None, None, None)
            if session.isolation is not None:
                self.isolations.append(session.isolation)

    def _new_session(self) -> WorkerSession:
        """A spawned worker for the main session's candidate, not loaded yet."""
        main = self.session
        session = WorkerSession(
            main.candidate,
            main.init_inputs,
            device=main.device,
            timeout=main.timeout,
            load_timeout=main.load_timeout,
            # one compile budget for the verification: a fresh instance spends what is left
            compile_timeout=main.compile_timeout,
            compile_budget=main.budget,
            # one scratch folder per verification: the same candidate's caches (Triton's,
            # a torch extension's build) are built once; the main session removes it
            scratch=main.scratch_folder(),
            isolation_mode=main.isolation_mode,
            confine_skip=list(main.confine_skip),
            forbidden=main.forbidden,
            model_class=main.model_class,
            weights=main.weights,
            access_trace=main.access_trace,
            knob_values=main.knob_values,  # the tuner's config holds in every instance
            autotune_pins=main.autotune_pins,
        )
        session.spawn()
        return session

    def prefetch_instance(self) -> None:
        """Start a worker for the next ``fresh_instance`` now, so its start-up (importing
        torch and Triton) overlaps the main instance's calls. ``verify`` asks for one before
        the first gate when ORD-02 will run: it waits there, unloaded, with no device
        context, until a gate takes it."""
        if self._spare is None:
            self._spare = self._new_session()

    def close_spare(self) -> None:
        """Stop a prefetched worker no gate took (``fresh_instance``); ``verify`` calls it
        when the gates are done."""
        spare, self._spare = self._spare, None
        if spare is not None:
            spare.close(wait=False)  # settled with the fresh instances (``verify``)
            spare.__exit__(None, None, None)

    def choice_points(
        self, gate_id: str, session: WorkerSession | None = None
    ) -> list[ChoicePoint]:
        """The timing-dependent choice points ``session`` (the main one) has seen so far."""
        try:
            return (session or self.session).choice_points()
        except ExecutionIncident as incident:
            self._incident(gate_id, "choice points", 0, incident)

    @property
    def propagates_specials(self) -> bool:
        return self.contract.postcondition.exceptional is ExceptionalPolicy.PROPAGATE


class Gate(ABC):
    """One adversarial check. Subclasses set the class attributes and implement ``run``."""

    id: ClassVar[str]
    kind: ClassVar[GateKind]
    title: ClassVar[str]
    always_runs: ClassVar[bool] = False  # still runs after the pipeline halted (RES-01)
    # Whether ``judge_case`` judges one case's run alone, as ``run`` does it: what
    # shrinking (``kernelgate.shrink``) and a shrunk replay need.
    shrinkable: ClassVar[bool] = False

    @abstractmethod
    def run(self, ctx: GateContext) -> GateResult: ...

    def judge_case(self, ctx: GateContext, case: Case, run: Run) -> GateResult | None:
        """This gate's judgement of one run of ``case``: its failure, or None where the
        case passes. Only gates that set ``shrinkable`` implement it."""
        raise NotImplementedError(f"{self.id} judges no single case alone")

    def result(self, status: Status, reason: str, **extra: Any) -> GateResult:
        return GateResult(self.id, self.kind, self.title, status, reason, **extra)

    def passed(self, reason: str, evidence: dict[str, Any] | None = None) -> GateResult:
        return self.result(Status.PASS, reason, evidence=evidence or {})

    def skipped(self, reason: str) -> GateResult:
        return self.result(Status.SKIPPED, reason)

    def failed(
        self,
        ctx: GateContext,
        reason: str,
        run: Run,
        findings: list[dict[str, Any]],
        evidence: dict[str, Any] | None = None,
    ) -> GateResult:
        if ctx.keep_failing_cases:  # for shrinking, after the gates (``kernelgate.shrink``)
            ctx.failing_cases[(self.id, run.case.label, run.case.seed)] = run.case
        counterexample = Counterexample(
            case=run.case.label,
            seed=run.case.seed,
            inputs=run.input_descriptions(),
            findings=findings,
            replay=ctx.replay(self.id),
        )
        return self.result(
            Status.FAIL, reason, counterexample=counterexample, evidence=evidence or {}
        )


def _same_values(a: Any, b: Any) -> bool:
    """Whether two init-input lists are the same values (tensors compared exactly)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and bool(torch.equal(a, b))
        )
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same_values(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def run_gate(gate: Gate, ctx: GateContext) -> GateResult:
    """Run one gate, turning an aborted run into ``skipped`` (the incident goes to RES-01)."""
    started = time.monotonic()
    ctx.forget_cases()
    if ctx.halted and not gate.always_runs:
        result = gate.skipped(f"not run: {ctx.halted} (see RES-01)")
    else:
        try:
            result = gate.run(ctx)
        except GateAborted as aborted:
            result = gate.skipped(f"aborted by an execution incident: {aborted} (see RES-01)")
    result.seconds = round(time.monotonic() - started, 3)
    return result
