"""Performance acceptance, judge side: a speedup the judge measured and checked (docs/perf.md).

For a few shapes of the contract's domain (the narrowed one when the verdict is narrowed):
the reference's own size first, then its sizes moved by x2 and /2 along the varying dims
(batch-like first) where the domain admits them. At each shape:

* the judge draws one fresh input set per trial (seeded, admitted to the contract's domain)
  and sends them all; the candidate and the reference (``Model``, in a worker of its own, so
  both run under the same conditions) are timed by ``perf/timing.py``'s judged protocol;
* after the run the judge picks ``samples`` trials at random (the candidate cannot know
  which while it runs) and checks their outputs, copied right after their intervals, against
  the float64 oracle under the contract's error model;
* KernelBench's method times the same two models beside it (same inputs every trial, no
  flush, events on the current stream): shown, never used for acceptance.

A "verified speedup" is reported only where the verdict holds (verified or narrowed) and
every sampled output passed, every output was a plain tensor and no trial misbehaved;
otherwise the report says why not, and the measured ratio stays in the evidence as data.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from kernelgate.contract.spec import Contract
from kernelgate.errors import CandidateBuildError, CandidateLoadError
from kernelgate.gates.base import Case, GateContext
from kernelgate.gates.outputs import structure_findings
from kernelgate.inputs.shapes import batch_like
from kernelgate.perf.timing import CPU_FLUSH_BYTES, L2_FLUSH_BYTES
from kernelgate.sandbox.session import ExecutionIncident, WorkerSession
from kernelgate.sandbox.wire import WireTensor
from kernelgate.serde import Serializable

PERF_SCHEMA = "kernelgate.perf/1"
SEED_KEY = "PERF"  # case seeds: ctx.case_seed(SEED_KEY, ...)
ACCEPTED = ("verified", "narrowed")  # verdicts under which a speedup can be "verified"


@dataclass
class PerfOptions:
    """How much to measure. Zero means the device's default (``resolved``)."""

    trials: int = 0  # judged trials per shape: 50 on a device, 8 on the CPU
    kernelbench_trials: int = 0  # KernelBench's method: 100 on a device (its default), 8 on CPU
    warmup: int = 3  # untimed calls first (compiles, autotuning); KernelBench uses 3 too
    samples: int = 3  # timed trials whose outputs are checked, per shape
    shapes: int = 3  # the reference's shape and up to this many - 1 others
    # bytes the judge may stage for one shape's input sets (each trial has its own)
    input_budget_bytes: int = 0  # 1 GiB on a device, 64 MiB on the CPU
    min_trials: int = 3  # a shape whose inputs are large still gets this many

    def resolved(self, device: str) -> PerfOptions:
        on_cpu = device == "cpu"
        return PerfOptions(
            trials=self.trials or (8 if on_cpu else 50),
            kernelbench_trials=self.kernelbench_trials or (8 if on_cpu else 100),
            warmup=self.warmup,
            samples=self.samples,
            shapes=max(1, self.shapes),
            input_budget_bytes=self.input_budget_bytes or ((64 if on_cpu else 1024) << 20),
            min_trials=max(1, self.min_trials),
        )


@dataclass
class Timing(Serializable):
    """Summary of one model's trials under one protocol, in milliseconds."""

    median_ms: float
    min_ms: float
    mean_ms: float
    trials: int
    # judged protocol on a device: the stream-ordered interval (no device-wide synchronize)
    stream_median_ms: float | None = None
    # judged protocol: the same interval around a call that does nothing (its own cost,
    # paid by both models alike; a kernel near it cannot show a large speedup)
    floor_median_ms: float | None = None

    @classmethod
    def of(cls, reply: dict[str, Any]) -> Timing:
        ms = reply["ms"]
        stream = reply.get("stream_ms") or []
        floor = reply.get("floor_ms") or []
        return cls(
            median_ms=statistics.median(ms),
            min_ms=min(ms),
            mean_ms=statistics.fmean(ms),
            trials=len(ms),
            stream_median_ms=statistics.median(stream) if stream else None,
            floor_median_ms=statistics.median(floor) if floor else None,
        )


@dataclass
class ShapeTiming(Serializable):
    """One shape: both models under both protocols, and the sampled outputs' check."""

    label: str
    sizes: dict[str, int]  # module-level sizes rebound ({} at the reference's own)
    reference: Timing | None = None
    candidate: Timing | None = None
    speedup: float | None = None  # reference median / candidate median, judged protocol
    kernelbench_reference: Timing | None = None
    kernelbench_candidate: Timing | None = None
    kernelbench_speedup: float | None = None
    kernelbench_note: str = ""  # why KernelBench's method has no numbers ("" if it has)
    sampled_trials: list[int] = field(default_factory=list)  # trial indices, from 0
    outputs_ok: bool = False
    problems: list[str] = field(default_factory=list)  # why the outputs or the run failed


@dataclass
class PerfReport(Serializable):
    """The ``perf`` entry of a verdict."""

    clock: str  # "cuda-events" | "cpu-perf-counter"
    verdict: str  # the gates' and rules' outcome the speedup rests on ("not judged": none)
    shapes: list[ShapeTiming]
    protocol: dict[str, Any]
    speedup: float | None = None  # geometric mean over the shapes measured
    kernelbench_speedup: float | None = None
    verified_speedup: float | None = None  # ``speedup`` where it is earned and checked
    not_verified_because: str = ""
    note: str = ""
    schema: str = PERF_SCHEMA


def perf_shapes(contract: Contract, sizes: dict[str, int], count: int) -> list[dict[str, int]]:
    """The shapes to time: ``{}`` (the reference's own sizes) first, then one dim at a time
    moved x2 or /2 (rounded down to its multiple), batch-like dims first, where ``contract``
    admits the value and the dim is a module-level size of the reference."""
    shapes: list[dict[str, int]] = [{}]
    dims = [d for d in contract.dims if d.varies and d.name in sizes]
    dims.sort(key=lambda d: not batch_like(contract, d.name))
    for dim in dims:
        for value in (dim.reference * 2, dim.reference // 2):
            value -= value % max(1, dim.multiple_of)
            if len(shapes) >= count:
                return shapes
            if value >= 1 and value != dim.reference and dim.admits(value):
                shapes.append({dim.name: value})
    return shapes[:count]


def _nbytes(values: list[Any]) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def _plain(values: list[Any]) -> list[Any]:
    """Input values as sent for timing: contiguous tensors, nothing else changed."""
    return [v.contiguous() if isinstance(v, torch.Tensor) else v for v in values]


def _geomean(values: list[float | None]) -> float | None:
    if not values or any(v is None or v <= 0 for v in values):
        return None
    return math.exp(statistics.fmean(math.log(v) for v in values if v is not None))


def _call_deadline(timeout: float, calls: int) -> float:
    """Seconds a perf request of ``calls`` calls may take: the gates already showed one call
    ends well within ``timeout``, so a tenth of it per call on top of one whole."""
    return timeout + calls * max(1.0, timeout / 10)


class PerfRun:
    """One performance measurement of a candidate against its reference (see the module)."""

    def __init__(
        self,
        ctx: GateContext,
        reference: Path,
        options: PerfOptions,
        *,
        outcome: str,
    ) -> None:
        self.ctx = ctx
        self.session = ctx.session
        self.device = self.session.device
        self.options = options.resolved(self.device)
        self.outcome = outcome
        self.reference_session = WorkerSession(
            Path(reference),
            list(self.session.init_inputs),
            device=self.device,
            timeout=self.session.timeout,
            clock_mode=None,
            model_class="Model",
        )

    def run(self, domain: Contract) -> PerfReport:
        """Measure at shapes of ``domain`` (the contract, or the narrowed one)."""
        options = self.options
        program = self.ctx.oracle.program
        shapes = perf_shapes(domain, dict(program.sizes), options.shapes)
        measured: list[ShapeTiming] = []
        clock = "cpu-perf-counter" if self.device == "cpu" else "cuda-events"
        with self.reference_session:
            for index, sizes in enumerate(shapes):
                measured.append(self._shape(index, sizes))
        return self._report(clock, measured)

    def _cases(self, index: int, sizes: dict[str, int]) -> list[Case]:
        """A warm-up input set, then one fresh set per trial, as many as the input budget
        allows (the warm-up set is never timed: a cache filled while warming up by the
        input's address would otherwise answer the trial that reuses it)."""
        options, ctx = self.options, self.ctx
        label = "reference shape" if not sizes else ", ".join(f"{k}={v}" for k, v in sizes.items())

        def case(trial: int) -> Case:
            seed = ctx.case_seed(SEED_KEY, index * 100_003 + trial)
            made = (
                ctx.sized_case(f"perf {label} trial {trial}", seed, sizes)
                if sizes
                else ctx.drawn_case(f"perf {label} trial {trial}", seed)
            )
            return ctx.admit(made)

        warm = case(0)  # the warm-up set (and KernelBench's method's one input)
        per_set = max(1, _nbytes(warm.values))
        trials = max(options.min_trials, min(options.trials, options.input_budget_bytes // per_set))
        return [warm] + [case(t) for t in range(1, trials + 1)]

    def _shape(self, index: int, sizes: dict[str, int]) -> ShapeTiming:
        label = "reference shape" if not sizes else ", ".join(f"{k}={v}" for k, v in sizes.items())
        shape = ShapeTiming(label=label, sizes=dict(sizes))
        options = self.options
        try:
            cases = self._cases(index, sizes)
        except Exception as exc:  # the reference cannot make inputs there: no shape to time
            shape.problems.append(f"inputs not made: {type(exc).__name__}: {exc}"[:500])
            return shape
        sets = [_plain(case.values) for case in cases]
        trials = len(sets) - 1  # sets[0] warms up; trial t runs on sets[t + 1]
        rng = random.Random(self.ctx.case_seed(SEED_KEY, -1 - index))
        shape.sampled_trials = sorted(rng.sample(range(trials), min(options.samples, trials)))
        judged_calls = options.warmup + trials
        bench_calls = options.warmup + options.kernelbench_trials
        try:
            for session in (self.session, self.reference_session):
                session.use_init(cases[0].init_inputs, cases[0].sizes_key)
            candidate = self.session.perf(
                sets,
                method="judged",
                warmup=options.warmup,
                timeout=_call_deadline(self.session.timeout, judged_calls),
            )
            outputs = self.session.perf_outputs(shape.sampled_trials)
            reference = self.reference_session.perf(
                sets,
                method="judged",
                warmup=options.warmup,
                timeout=_call_deadline(self.session.timeout, judged_calls),
            )
            self.reference_session.perf_outputs([])  # lets its copies go
        except (ExecutionIncident, CandidateBuildError, CandidateLoadError) as incident:
            shape.problems.append(f"the run misbehaved: {incident}"[:1000])
            return shape
        shape.candidate, shape.reference = Timing.of(candidate), Timing.of(reference)
        shape.speedup = _ratio(shape.reference.median_ms, shape.candidate.median_ms)
        if candidate["not_plain"]:
            shape.problems.append(candidate["not_plain"])
        for trial, got in zip(shape.sampled_trials, outputs):
            try:
                shape.problems += self._check(cases[trial + 1], got, trial)
            except Exception as exc:  # outputs the judge cannot even compare: not passed
                shape.problems.append(f"trial {trial}: outputs not judged: {exc!r}"[:500])
        shape.outputs_ok = not shape.problems
        self._kernelbench(shape, sets[0], _call_deadline(self.session.timeout, bench_calls))
        return shape

    def _kernelbench(self, shape: ShapeTiming, inputs: list[Any], deadline: float) -> None:
        """KernelBench's method on both models, beside the judged numbers. Its failure (a
        candidate whose patches break the functions it uses) is noted, never a problem of
        the candidate's outputs: it takes nothing from the judged measurement."""
        measured = []
        for session in (self.session, self.reference_session):
            try:
                reply = session.perf(
                    [inputs],
                    method="kernelbench",
                    warmup=self.options.warmup,
                    trials=self.options.kernelbench_trials,
                    timeout=deadline,
                )
            except (ExecutionIncident, CandidateBuildError, CandidateLoadError) as incident:
                shape.kernelbench_note = f"KernelBench's method failed: {incident}"[:1000]
                return
            measured.append(Timing.of(reply))
        shape.kernelbench_candidate, shape.kernelbench_reference = measured
        shape.kernelbench_speedup = _ratio(measured[1].median_ms, measured[0].median_ms)

    def _check(self, case: Case, got: list[Any], trial: int) -> list[str]:
        """Problems of one sampled trial's outputs against the oracle (none: it passed)."""
        ctx = self.ctx
        values = [g.view() if isinstance(g, WireTensor) else g for g in got]
        expected = ctx.expected(case)
        structure = structure_findings(values, expected, ctx.output_dtypes(case))
        if structure:
            return [f"trial {trial}: output structure differs from the reference: {structure[:2]}"]
        problems = []
        for k, (want, value) in enumerate(zip(expected, values)):
            if not hasattr(want, "shape"):
                continue
            assessment = ctx.assess(case, k, value)
            if not assessment.passed:
                problems.append(
                    f"trial {trial}, output {k}: error exceeds the {assessment.model} bound: "
                    f"{assessment.worst_text}"
                )
        return problems

    def _report(self, clock: str, shapes: list[ShapeTiming]) -> PerfReport:
        options = self.options
        flush = CPU_FLUSH_BYTES if self.device == "cpu" else L2_FLUSH_BYTES
        protocol = {
            "judged": (
                "one fresh input set per trial; "
                + (
                    f"{flush >> 20} MiB written before each trial (L2 flush); start event, "
                    "the call on a fresh stream, a device-wide synchronize, end event"
                    if clock == "cuda-events"
                    else f"{flush >> 20} MiB written before each trial; the host clock "
                    "(bound before the candidate loaded) around the call: CPU-interpreter "
                    "timing, not device performance"
                )
                + f"; outputs of {options.samples} random trials per shape checked against "
                "the float64 oracle"
            ),
            "kernelbench": (
                f"KernelBench's method: {options.warmup} warm-up calls, then "
                f"{options.kernelbench_trials} trials on the same inputs, "
                + (
                    "an event pair on the current stream around the call, then a synchronize; "
                    "no flush, no output check"
                    if clock == "cuda-events"
                    else "the host clock around the call; no flush, no output check"
                )
            ),
            "trials": options.trials,
            "warmup": options.warmup,
            "samples": options.samples,
            "input_budget_bytes": options.input_budget_bytes,
            "reference_model": "the reference's Model, timed in a worker of its own",
        }
        report = PerfReport(
            clock=clock,
            verdict=self.outcome,
            shapes=shapes,
            protocol=protocol,
            speedup=_geomean([s.speedup for s in shapes]),
            kernelbench_speedup=_geomean([s.kernelbench_speedup for s in shapes]),
        )
        if clock == "cpu-perf-counter":
            report.note = (
                "CPU-interpreter timing: Triton kernels run in the Triton interpreter on the "
                "host, so these numbers test the protocol, not the kernel's speed"
            )
        why = _not_verified(self.outcome, shapes)
        if why:
            report.not_verified_because = why
        else:
            report.verified_speedup = report.speedup
        return report


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator > 0 else None


def _not_verified(outcome: str, shapes: list[ShapeTiming]) -> str:
    """Why the measured speedup is not a verified one ("" when it is)."""
    if outcome not in ACCEPTED:
        return f"the verdict is {outcome}: a speedup counts only for a kernel that holds"
    for shape in shapes:
        if shape.problems:
            return f"{shape.label}: {shape.problems[0]}"
        if shape.speedup is None:
            return f"{shape.label}: not measured"
    if not shapes:
        return "no shape was measured"
    return ""
