"""The shape every gate has, and the context gates run in.

A gate is a class with an ``id``, a ``kind`` (tolerance-free or thresholded), a ``title``
and a ``run(ctx)`` that returns a ``GateResult``. Gates never talk to the worker or the
oracle directly: ``GateContext`` builds seeded cases, runs the candidate (turning every
misbehaviour into a recorded incident) and evaluates the oracle, so each gate module holds
only its own judgement.
"""

from __future__ import annotations

import shlex
import time
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property
from typing import Any, ClassVar

import torch

from kernelgate.contract.spec import Contract, ExceptionalPolicy
from kernelgate.inputs.distributions import draw
from kernelgate.inputs.placement import GUARD_BYTES, POISONS, PlacedTensor
from kernelgate.oracle.error_models import Assessment, assess_ensemble
from kernelgate.oracle.fp64 import Oracle, flatten_outputs
from kernelgate.sandbox.session import CallResult, ExecutionIncident, WorkerSession
from kernelgate.sandbox.wire import WireTensor, dtype_name
from kernelgate.serde import Serializable


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

    def describe(self) -> list[dict[str, Any]]:
        return [
            {"shape": list(v.shape), "dtype": dtype_name(v.dtype)}
            if isinstance(v, torch.Tensor)
            else {"value": repr(v)}
            for v in self.values
        ]


@dataclass
class Run:
    """A case as it was placed, sent and answered."""

    case: Case
    placed: list[Any]
    result: CallResult

    @cached_property
    def outputs(self) -> list[Any]:
        """Flat list of outputs: logical views (CPU) for tensors, raw values otherwise."""
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
    ) -> None:
        self.contract = contract
        self.oracle = oracle
        self.session = session
        self.seed = seed
        self.replay_argv = replay
        self.incidents: list[Incident] = []
        self.halted: str | None = None  # set after a hang: later gates are not run
        self._expected: dict[tuple[str, int], list[Any]] = {}
        self._honest: dict[tuple[str, int], dict[str, list[Any]]] = {}

    # -- cases ----------------------------------------------------------------------------
    def case_seed(self, gate_id: str, index: int) -> int:
        return zlib.crc32(f"{gate_id}/{index}/{self.seed}".encode())

    @cached_property
    def template(self) -> list[Any]:
        """The reference's own ``get_inputs()`` (KernelBench seeding): shapes, dtypes, ints."""
        return self.oracle.program.inputs(seed=42)

    def drawn_case(self, label: str, seed: int, distribution: str = "normal") -> Case:
        """Floating inputs drawn from ``distribution``; other inputs as the reference makes them."""
        values = [
            draw(distribution, seed + i, tuple(v.shape), v.dtype)
            if isinstance(v, torch.Tensor) and v.is_floating_point()
            else (v.clone() if isinstance(v, torch.Tensor) else v)
            for i, v in enumerate(self.template)
        ]
        return Case(label, seed, values)

    def replay(self, gate_id: str) -> str:
        return shlex.join([*self.replay_argv, "--only", gate_id, "--seed", str(self.seed)])

    # -- evaluation -----------------------------------------------------------------------
    def expected(self, case: Case) -> list[Any]:
        key = (case.label, case.seed)
        if key not in self._expected:
            self._expected[key] = self.oracle.expected(case.values)
        return self._expected[key]

    def honest(self, case: Case) -> dict[str, list[Any]]:
        key = (case.label, case.seed)
        if key not in self._honest:
            self._honest[key] = self.oracle.honest(case.values)
        return self._honest[key]

    def assess(self, case: Case, output_index: int, actual: torch.Tensor) -> Assessment:
        """Judge one candidate output of ``case`` under the contract's error model.

        Every thresholded gate goes through here, so the error model is chosen in one place.
        """
        expected = self.expected(case)[output_index]
        honest = {name: runs[output_index] for name, runs in self.honest(case).items()}
        return assess_ensemble(expected, actual, honest)

    def run(
        self,
        gate_id: str,
        case: Case,
        *,
        poison: int = POISONS[0],
        hold_bytes: int = 0,
        place: Any = None,
    ) -> Run:
        """Place ``case`` in guarded storages and run the candidate on it once."""
        placer = place or (lambda v: PlacedTensor.place(v, poison=poison))
        placed = [placer(v) if isinstance(v, torch.Tensor) else v for v in case.values]
        wire_inputs = [p.as_wire() if isinstance(p, PlacedTensor) else p for p in placed]
        try:
            result = self.session.call(
                wire_inputs, poison=poison, guard_bytes=GUARD_BYTES, hold_bytes=hold_bytes
            )
        except ExecutionIncident as incident:
            self.incidents.append(
                Incident(
                    gate_id,
                    case.label,
                    case.seed,
                    incident.kind,
                    incident.detail,
                    incident.log_tail[-2000:],
                )
            )
            if incident.kind == "timeout":
                self.halted = f"candidate hung in {gate_id} ({case.label})"
            raise GateAborted(str(incident)) from None
        return Run(case, placed, result)

    @property
    def propagates_specials(self) -> bool:
        return self.contract.postcondition.exceptional is ExceptionalPolicy.PROPAGATE


class Gate(ABC):
    """One adversarial check. Subclasses set the class attributes and implement ``run``."""

    id: ClassVar[str]
    kind: ClassVar[GateKind]
    title: ClassVar[str]
    always_runs: ClassVar[bool] = False  # still runs after the pipeline halted (RES-01)

    @abstractmethod
    def run(self, ctx: GateContext) -> GateResult: ...

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


def run_gate(gate: Gate, ctx: GateContext) -> GateResult:
    """Run one gate, turning an aborted run into ``skipped`` (the incident goes to RES-01)."""
    started = time.monotonic()
    if ctx.halted and not gate.always_runs:
        result = gate.skipped(f"not run: {ctx.halted} (see RES-01)")
    else:
        try:
            result = gate.run(ctx)
        except GateAborted as aborted:
            result = gate.skipped(f"aborted by an execution incident: {aborted} (see RES-01)")
    result.seconds = round(time.monotonic() - started, 3)
    return result
