"""``tune()``: search a candidate's launch knobs; only a config the contract verifies counts.

Each config is evaluated by the judge itself, as ``verify --perf`` would judge the
candidate built with it: a fresh worker whose candidate runs with the config
(``KERNELGATE_KNOB_VALUES`` in its environment, autotuned kernels pinned by the worker:
``tune/knobs.py``, ``tune/pin.py``), the screening gates (every gate by default, or a
cheaper documented set, ``screen``), then the perf layer's judged timing at the reference
shape (``perf/measure.py``: fresh inputs per trial, flushed caches, sampled outputs checked
against the oracle). A config passes when that verdict is "verified" and the sampled
outputs were right; its reward is then its speed. Because the judge times each config,
the search runs under the Triton interpreter too, where Triton's own autotuner cannot time.

The chosen config is the fastest passing one, re-verified with every gate when screening
ran fewer; if that re-verification fails, the next fastest is tried, and so on. A config
that failed is never returned: with none left, there is no choice (``chosen`` is None).

Triton's own pick (``triton_pick``) is measured beside it where Triton can time (a GPU):
the candidate unpinned, its autotuner free, verified with every gate and timed the same
way; which config Triton took is what the worker's autotune hook reported (CMP-01's choice
points), data from the candidate's process, not proof.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelgate.errors import CandidateLoadError, KernelgateError
from kernelgate.gates import GATE_IDS
from kernelgate.gates.base import GateResult, Status
from kernelgate.perf.measure import PerfOptions
from kernelgate.sandbox.compile_budget import DEFAULT_COMPILE_TIMEOUT
from kernelgate.serde import Serializable
from kernelgate.tune.knobs import KnobSpace, knob_space
from kernelgate.tune.search import Config, Evaluation, SearchResult, grpo_search
from kernelgate.verdict import Outcome, Verdict

TUNE_SCHEMA = "kernelgate.tune/1"
CPU_TRITON_PICK_WHY = (
    "Triton's autotuner times its configs on a GPU; under the Triton interpreter (CPU mode) "
    "it cannot time, and the worker gives it its first config"
)
NO_AUTOTUNE_WHY = "the candidate has no @triton.autotune kernel: Triton makes no pick"


@dataclass
class TuneOptions:
    """How the search runs and how each config is judged."""

    device: str = "cpu"
    rounds: int = 4
    group: int = 4  # configs sampled per round
    seed: int = 0  # the search's sampling and every verification's seed
    rate: float = 1.0  # the policy's learning rate
    max_evaluations: int | None = None  # distinct configs judged at most (None: no cap)
    screen: tuple[str, ...] = ()  # gates run per config; () runs every gate
    trials: int = 0  # judged timing trials per config (0: the perf layer's default)
    timeout: float = 60.0
    compile_timeout: float = DEFAULT_COMPILE_TIMEOUT
    triton_pick: bool = True  # measure Triton's own pick beside (GPU only)
    contract: Path | None = None  # a contract file instead of the derived one (verify's)

    def check(self) -> None:
        if self.rounds < 1 or self.group < 1:
            raise KernelgateError("--rounds and --group must be at least 1")
        if self.max_evaluations is not None and self.max_evaluations < 1:
            raise KernelgateError("--max-evaluations must be at least 1")
        unknown = set(self.screen) - set(GATE_IDS)
        if unknown:
            raise KernelgateError(
                f"unknown gate(s) {', '.join(sorted(unknown))} in --screen; "
                f"known: {', '.join(GATE_IDS)}"
            )


@dataclass
class ConfigResult(Serializable):
    """One evaluated config: its knobs, the contract's word on it, its judged time."""

    knobs: dict[str, Any]
    verdict: str  # verified | rejected | narrowed | error (did not load or build)
    gates: list[str]  # the gates that ran (RES-01 always does)
    failed: list[str] = field(default_factory=list)  # failed gates and rules
    time_ms: float | None = None  # judged median at the reference shape
    reference_ms: float | None = None  # the reference, same protocol, same inputs
    speedup: float | None = None
    outputs_ok: bool | None = None  # the timed trials' sampled outputs matched the oracle
    passed: bool = False  # counted by the search: verified and sampled outputs right
    full_verdict: str | None = None  # every gate, where it was re-verified (the chosen one)
    full_failed: list[str] = field(default_factory=list)
    error: str = ""
    seconds: float = 0.0


@dataclass
class TuneReport(Serializable):
    """``kernelgate tune``'s JSON."""

    reference: str
    candidate: str
    device: str
    knobs: dict[str, list[Any]]  # the space: each knob's values (autotune: config labels)
    chosen: dict[str, Any] | None  # the chosen config's knobs (None: no config holds)
    chosen_time_ms: float | None
    chosen_verdict: str | None  # the full re-verification's verdict ("verified")
    configs: list[ConfigResult]
    triton_pick: dict[str, Any] | None
    triton_pick_why: str = ""  # why there is no Triton pick
    search: dict[str, Any] = field(default_factory=dict)
    note: str = ""
    seconds: float = 0.0
    schema: str = TUNE_SCHEMA


def _time(verdict: Verdict) -> tuple[float | None, float | None, float | None, bool | None]:
    """The candidate's and the reference's judged medians at the reference shape."""
    perf = verdict.perf or {}
    shapes = perf.get("shapes") or []
    if not shapes:
        return None, None, None, None
    shape = shapes[0]
    cand, ref = shape.get("candidate"), shape.get("reference")
    return (
        cand["median_ms"] if cand else None,
        ref["median_ms"] if ref else None,
        shape.get("speedup"),
        bool(shape.get("outputs_ok")),
    )


def judge_config(
    reference: Path,
    candidate: Path,
    *,
    knob_values: dict[str, Any] | None,
    autotune_pins: dict[str, int] | None,
    only: Sequence[str],
    options: TuneOptions,
    timed: bool = True,
) -> Verdict:
    """``verify`` (and ``--perf`` at the reference shape when ``timed``) of ``candidate``
    run with one config, in workers that carry it (fresh instances too)."""
    from kernelgate.pipeline import resolve_device, verify
    from kernelgate.sandbox.session import WorkerSession

    device = resolve_device(options.device)
    session = WorkerSession(
        candidate,
        [],
        device=device,
        timeout=options.timeout,
        compile_timeout=options.compile_timeout,
        knob_values=knob_values,
        autotune_pins=autotune_pins,
    )
    session.spawn()
    perf = PerfOptions(trials=options.trials, kernelbench_trials=1, shapes=1)
    try:
        return verify(
            reference,
            candidate,
            device=device,
            timeout=options.timeout,
            compile_timeout=options.compile_timeout,
            contract=options.contract,
            seed=options.seed,
            only=list(only) or None,
            session=session,
            perf=perf if timed else None,
        )
    finally:
        # verify ends the session itself; this covers an error raised before it took it
        session.__exit__(None, None, None)


def _not_selected(gate: GateResult) -> bool:
    """Whether ``gate`` was left out by the screening set (not a gate that ran and skipped)."""
    return gate.status is Status.SKIPPED and gate.reason.startswith("not selected")


class Tuner:
    """One tuning run of ``candidate`` against ``reference`` (see the module)."""

    def __init__(
        self,
        reference: str | Path,
        candidate: str | Path,
        options: TuneOptions,
        *,
        on_config: Callable[[str, ConfigResult | None], None] | None = None,
        on_stage: Callable[[str], None] | None = None,
    ) -> None:
        options.check()
        self.reference, self.candidate, self.options = Path(reference), Path(candidate), options
        if not self.reference.is_file():
            raise KernelgateError(f"reference {reference} is not a file")
        if options.contract is not None and not options.contract.is_file():
            raise KernelgateError(f"contract {options.contract} is not a file")
        self.space: KnobSpace = knob_space(candidate)
        self.results: dict[Config, ConfigResult] = {}
        self.on_config = on_config
        self.on_stage = on_stage or (lambda stage: None)  # what runs after the search

    def _judge(self, config: Config, only: Sequence[str], timed: bool) -> ConfigResult:
        space, started = self.space, time.monotonic()
        gates = list(only) or list(GATE_IDS)
        try:
            verdict = judge_config(
                self.reference,
                self.candidate,
                knob_values=space.declared_values(config),
                autotune_pins=space.autotune_pins(config),
                only=only,
                options=self.options,
                timed=timed,
            )
        except CandidateLoadError as exc:  # this config does not load or build: it fails
            return ConfigResult(
                knobs=space.described(config),
                verdict="error",
                gates=gates,
                error=str(exc)[:1000],
                seconds=round(time.monotonic() - started, 2),
            )
        time_ms, reference_ms, speedup, outputs_ok = _time(verdict)
        holds = verdict.verdict is Outcome.VERIFIED
        return ConfigResult(
            knobs=space.described(config),
            verdict=verdict.verdict.value,
            gates=[g.id for g in verdict.gates if not _not_selected(g)],
            failed=verdict.failed_gates + verdict.failed_rules,
            time_ms=time_ms,
            reference_ms=reference_ms,
            speedup=speedup,
            outputs_ok=outputs_ok,
            passed=holds and (outputs_ok is not False or not timed),
            seconds=round(time.monotonic() - started, 2),
        )

    def evaluate(self, config: Config) -> Evaluation:
        """The search's evaluator: judge ``config`` with the screening gates, then time it."""
        label = ", ".join(f"{k}={v}" for k, v in self.space.values_of(config).items())
        if self.on_config is not None:
            self.on_config(label, None)
        result = self._judge(config, self.options.screen, timed=True)
        if not self.options.screen:  # every gate ran: this is the full verdict
            result.full_verdict, result.full_failed = result.verdict, list(result.failed)
        self.results[config] = result
        if self.on_config is not None:
            self.on_config(label, result)
        return Evaluation(passed=result.passed, time_ms=result.time_ms)

    def choose(self, search: SearchResult) -> Config | None:
        """The fastest passing config that every gate verifies (None: no config holds)."""
        rejected: set[Config] = set()
        while True:
            ranked = search.ranked(rejected)
            if not ranked:
                return None
            best = ranked[0]
            result = self.results[best]
            if result.full_verdict is None:  # screened with fewer gates: every gate now
                self.on_stage("re-verifying the fastest passing config with every gate")
                full = self._judge(best, (), timed=False)
                result.full_verdict, result.full_failed = full.verdict, full.failed
                if full.error:
                    result.error = full.error
            if result.full_verdict == Outcome.VERIFIED.value:
                return best
            rejected.add(best)

    def triton_pick(self) -> tuple[dict[str, Any] | None, str]:
        """Triton's own pick beside the chosen config, where Triton can time (a GPU)."""
        if not any(k.autotune_kernel for k in self.space.knobs):
            return None, NO_AUTOTUNE_WHY
        if self.options.device == "cpu":
            return None, CPU_TRITON_PICK_WHY
        if not self.options.triton_pick:
            return None, "not asked for (--no-triton-pick)"
        self.on_stage("measuring Triton's own pick (its autotuner free)")
        started = time.monotonic()
        defaults = {k.name: k.values[0] for k in self.space.knobs if k.autotune_kernel is None}
        verdict = judge_config(
            self.reference,
            self.candidate,
            knob_values=defaults or None,
            autotune_pins=None,
            only=(),
            options=self.options,
        )
        time_ms, reference_ms, speedup, outputs_ok = _time(verdict)
        picked: dict[str, Any] = {}
        for gate in verdict.gates:
            for point in gate.evidence.get("choice_points", []) if gate.id == "CMP-01" else []:
                if point.get("kind") == "autotune" and point.get("chosen") is not None:
                    name = "autotune:" + str(point.get("what"))
                    knob = next((k for k in self.space.knobs if k.name == name), None)
                    index = int(point["chosen"])
                    label = knob.label(index) if knob and index < len(knob.values) else "?"
                    picked[name] = {"index": index, "config": label}
        return {
            "knobs": picked or None,
            "knobs_source": "the worker's autotune hook (reported by the candidate's process)",
            "verdict": verdict.verdict.value,
            "failed": verdict.failed_gates + verdict.failed_rules,
            "time_ms": time_ms,
            "reference_ms": reference_ms,
            "speedup": speedup,
            "outputs_ok": outputs_ok,
            "seconds": round(time.monotonic() - started, 2),
        }, ""

    def run(self) -> TuneReport:
        started, options = time.monotonic(), self.options
        search = grpo_search(
            [len(k.values) for k in self.space.knobs],
            self.evaluate,
            rounds=options.rounds,
            group=options.group,
            seed=options.seed,
            rate=options.rate,
            max_evaluations=options.max_evaluations,
        )
        chosen = self.choose(search)
        pick, why = self.triton_pick()
        knobs = {k.name: list(k.labels) if k.labels else list(k.values) for k in self.space.knobs}
        return TuneReport(
            reference=str(self.reference),
            candidate=str(self.candidate),
            device=options.device,
            knobs=knobs,
            chosen=None if chosen is None else self.space.described(chosen),
            chosen_time_ms=None if chosen is None else self.results[chosen].time_ms,
            chosen_verdict=None if chosen is None else self.results[chosen].full_verdict,
            configs=[self.results[c] for c in search.order],
            triton_pick=pick,
            triton_pick_why=why,
            search={
                "method": "group-relative policy gradient (categorical policy per knob)",
                "rounds": options.rounds,
                "group": options.group,
                "seed": options.seed,
                "rate": options.rate,
                "max_evaluations": options.max_evaluations,
                "screen": list(options.screen) or "all gates",
                "contract": None if options.contract is None else str(options.contract),
                "space_size": self.space.size,
                "evaluated": len(search.order),
                "final_policy": _policy(self.space, search),
                "rewards": [r.rewards for r in search.rounds],
            },
            note=(
                "CPU-interpreter timing: the Triton interpreter on the host, so the ranking "
                "tests the tuner, not the kernel's device speed"
                if options.device == "cpu"
                else ""
            ),
            seconds=round(time.monotonic() - started, 2),
        )


def _policy(space: KnobSpace, search: SearchResult) -> dict[str, dict[str, float]]:
    """The policy's probabilities after the last round, per knob and value."""
    if not search.rounds:
        return {}
    last = search.rounds[-1].probabilities
    return {
        knob.name: {str(v): round(p, 4) for v, p in zip(knob.values, probs)}
        for knob, probs in zip(space.knobs, last)
    }


def tune(
    reference: str | Path,
    candidate: str | Path,
    options: TuneOptions | None = None,
    *,
    on_config: Callable[[str, ConfigResult | None], None] | None = None,
) -> TuneReport:
    """Tune ``candidate``'s knobs against ``reference`` (see the module)."""
    return Tuner(reference, candidate, options or TuneOptions(), on_config=on_config).run()
