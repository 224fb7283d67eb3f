"""The verdict: per-gate results, the verified domain, the skips, and what it rests on."""

from __future__ import annotations

import datetime
import platform
import subprocess
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kernelgate.gates.base import GateKind, GateResult, Status
from kernelgate.serde import Serializable
from kernelgate.static import Finding, RuleResult

# /2 (issue 21) adds ``static`` (the static layer's findings), ``rules`` (the rules beside
# the gates: {id, status, message, where}) and ``failed_rules``; a failed rule rejects.
VERDICT_SCHEMA = "kernelgate.verdict/2"


class Outcome(StrEnum):
    VERIFIED = "verified"  # no gate failed on the declared domain
    NARROWED = "narrowed"  # no gate failed on a stated sub-domain
    REJECTED = "rejected"


@dataclass
class Verdict(Serializable):
    verdict: Outcome
    reference: str
    candidate: str
    gates: list[GateResult]
    contract: dict[str, Any]
    environment: dict[str, Any]
    seed: int
    seconds: float
    skipped: list[str] = field(default_factory=list)  # "GATE: reason", never hidden
    verified_domain: dict[str, Any] | None = None
    # Seconds the candidate's builds took from the compile budget (--compile-timeout), and
    # who paid them (pipeline.compile_evidence): sandbox/compile_budget.py
    compile_seconds: float = 0.0
    compile: dict[str, Any] = field(default_factory=dict)
    # The static layer's findings (flags and hard), and the rules beside the gates; a rule
    # with status fail rejects the verdict while the gates' results stay as they are.
    static: list[Finding] = field(default_factory=list)
    rules: list[RuleResult] = field(default_factory=list)
    # Faults a domain gate excused outside the reference's layouts (domain.py): a narrowed
    # kernel's preconditions it does not guard, named; ``strict`` verdicts reject on them.
    unguarded_precondition: list[dict[str, Any]] = field(default_factory=list)
    strict: bool = False
    # A problem folder's statement (formats/problem.py) when the candidate was judged
    # against one: name, precision, tolerance, forbidden, declared shapes
    problem: dict[str, Any] | None = None
    # ``verify --perf`` / ``bench``: the judge's timing against the reference (perf/measure.py,
    # docs/perf.md); None when not asked for
    perf: dict[str, Any] | None = None
    # AUTH-01's evidence (sandbox/authorship.py): {authored_share, kernels: [{name, authored,
    # device_time_s, launches}], how}, or authored_share None and ``why`` it was not measured
    authorship: dict[str, Any] | None = None
    # SHA-256 of the two programs' text as judged: what a dispatcher (dispatch/) checks
    # before it trusts this verdict for the programs it is handed.
    reference_sha256: str | None = None
    candidate_sha256: str | None = None
    # How the verdict was asked for, so ``kernelgate replay`` can ask again from the evidence
    # alone: ``command`` (the verify argv every replay starts from: programs, device,
    # contract file, rule options), ``only`` (the gates selected, None: all), ``timeout`` and
    # ``compile_timeout`` (seconds). Empty in evidence written before it existed.
    judged_with: dict[str, Any] = field(default_factory=dict)
    schema: str = VERDICT_SCHEMA

    @property
    def failed_gates(self) -> list[str]:
        return [g.id for g in self.gates if g.status is Status.FAIL]

    @property
    def failed_rules(self) -> list[str]:
        return [r.id for r in self.rules if r.status is Status.FAIL]

    def gate(self, gate_id: str) -> GateResult:
        return next(g for g in self.gates if g.id == gate_id)

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["tolerance_free"] = [g.id for g in self.gates if g.kind is GateKind.EXACT]
        data["thresholded"] = [g.id for g in self.gates if g.kind is GateKind.THRESHOLDED]
        data["failed_gates"] = self.failed_gates
        data["failed_rules"] = self.failed_rules
        return data


def combine(
    gates: list[GateResult], rules: list[RuleResult] = (), *, strict: bool = False
) -> tuple[Outcome, list[str]]:
    """The outcome and the skips. A failed rule rejects whatever the gates say: a kernel
    that is numerically right but breaks a rule (a forbidden call) is not accepted, and
    is not narrowed either, since no sub-domain mends a rule. ``strict``: a kernel that
    would be narrowed around a fault it does not guard (an unguarded precondition: a
    misaligned address on an offset view) is rejected, since a caller outside the
    dispatcher's guard crashes its process instead of getting an error."""
    skipped = [f"{g.id}: {g.reason}" for g in gates if g.status is Status.SKIPPED]
    if any(r.status is Status.FAIL for r in rules):
        return Outcome.REJECTED, skipped
    if any(g.status is Status.FAIL for g in gates):
        # Only layout/shape failures with a stated passing sub-domain narrow (see domain.py).
        from kernelgate.domain import narrowable, unguarded_preconditions

        if not narrowable(gates) or (strict and unguarded_preconditions(gates)):
            return Outcome.REJECTED, skipped
        return Outcome.NARROWED, skipped
    return Outcome.VERIFIED, skipped


def environment(
    device: str, oracle_device: str, isolation: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The trusted computing base a verdict rests on.

    ``isolation``: what confined the candidate's workers, as their launchers reported it
    before any candidate code ran (sandbox/confine.py): ``in_force``, ``missing`` with a
    reason for each, ``landlock_abi``. A verdict judged with workers is given one; a
    mechanism that did not hold is listed in ``missing``, never left out.
    """
    import torch
    import triton

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "device": device,
        "triton_interpreter": device == "cpu",
        "oracle_device": oracle_device,
        "oracle_dtype": "float64",
        # when: evidence copied off a device is data of that day's toolchain and code
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    if isolation is not None:
        env["isolation"] = isolation
    if device.startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
        try:
            env["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            env["driver"] = "unknown"
    return env
