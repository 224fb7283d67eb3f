"""CMP-01: correct over many input distributions at the reference shape.

Also judges every path the candidate's clocks could choose (see docs/design.md,
"Timing-adversarial instances"): when the main instance made a timing-dependent choice
(read a clock, benchmarked, autotuned), fresh instances whose clocks lie run the reference
case again, and each autotuned kernel runs each of its configs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from kernelgate.gates.base import (
    Case,
    Gate,
    GateAborted,
    GateContext,
    GateKind,
    GateResult,
    Run,
)
from kernelgate.gates.outputs import structure_findings
from kernelgate.inputs.distributions import DISTRIBUTIONS
from kernelgate.sandbox.clocks import ChoicePoint

# Fresh instances judged when the main instance made a timing-dependent choice: one where
# every later measurement looks faster, one where it looks slower (between them, each
# two-way choice goes both ways), one seeded at random (for choices among more than two).
CLOCK_MODES = ("faster", "slower", "random")
RANDOM_SEED_INDEX = 1000  # case_seed index of the random clock's seed (past the distributions)
# Fresh instances that force autotune configs beyond those the clock modes used (slower
# takes each kernel's first config, faster its last). A fresh worker costs ~3 s on the CPU
# (seconds more on a device, where each config compiles), and 8 covers every config of the
# usual autotune lists (2 to 10 configs); longer lists get 8 indices spread over them, and
# the evidence names the configs left out.
CONFIG_INSTANCES_CAP = 8


@dataclass
class _Judged:
    """One case of one instance, judged: its first failure (if any) and its worst ratio."""

    failure: GateResult | None = None
    worst: float = 0.0
    structure: list[dict[str, Any]] = field(default_factory=list)
    model: str = ""
    params: dict[str, Any] = field(default_factory=dict)


class ValuesGate(Gate):
    id: ClassVar[str] = "CMP-01"
    kind: ClassVar[GateKind] = GateKind.THRESHOLDED
    title: ClassVar[str] = "values over input distributions"
    shrinkable: ClassVar[bool] = True

    def run(self, ctx: GateContext) -> GateResult:
        per_distribution: dict[str, Any] = {}
        first_failure: GateResult | None = None
        worst = 0.0
        model_params: dict[str, Any] = {}
        model = ctx.contract.postcondition.error_model.name
        cases: dict[str, Case] = {}
        for index, distribution in enumerate(DISTRIBUTIONS):
            if ctx.focused_out(self.id, f"distribution={distribution}"):  # a replay of another
                continue
            case = ctx.drawn_case(
                f"distribution={distribution}", ctx.case_seed(self.id, index), distribution
            )
            cases[distribution] = case
            judged = self._judge(ctx, case, ctx.run(self.id, case))
            first_failure = first_failure or judged.failure
            if judged.structure:
                per_distribution[distribution] = {"structure": judged.structure}
                continue
            model, model_params = judged.model or model, judged.params or model_params
            worst = max(worst, judged.worst)
            per_distribution[distribution] = {"worst_error_over_bound": judged.worst}
        evidence: dict[str, Any] = {
            "error_model": model,
            "model_params_last_case": model_params,
            "worst_error_over_bound": worst,
            "per_distribution": per_distribution,
        }
        if first_failure is not None:
            try:  # what the clocks chose may explain the failure; it stands either way
                seen = ctx.choice_points(self.id)
            except GateAborted:
                seen = []
            evidence["choice_points"] = [p.to_dict() for p in seen]
            evidence["timing_instances"] = []
            evidence["timing_note"] = "no fresh instance run: the main instance already fails"
            first_failure.evidence = evidence
            return first_failure
        if self.id in ctx.focus:  # a replay of one stored case, which passed this time
            return self.passed(
                f"the replayed case passes (worst error/bound {worst:.3g})", evidence
            )
        worst_distribution = max(
            per_distribution,
            key=lambda d: per_distribution[d].get("worst_error_over_bound", 0.0),
        )
        replayed = [cases["normal"]]
        if worst_distribution != "normal":
            replayed.append(cases[worst_distribution])
        timing_failure, timing, summary = self._timing_instances(ctx, replayed)
        evidence |= timing
        if timing_failure is not None:
            timing_failure.evidence = evidence
            return timing_failure
        return self.passed(
            f"{len(DISTRIBUTIONS)} distributions within the {model} bound "
            f"(worst error/bound {worst:.3g}){summary}",
            evidence,
        )

    def judge_case(self, ctx: GateContext, case: Case, run: Run) -> GateResult | None:
        return self._judge(ctx, case, run).failure

    def _judge(self, ctx: GateContext, case: Case, run: Run, instance: str = "") -> _Judged:
        """Structure, then every output under the error model; ``instance`` names a fresh
        instance in the failure's reason (empty for the main one)."""
        judged = _Judged()
        expected = ctx.expected(case)
        structure = structure_findings(run.outputs, expected, ctx.output_dtypes(case))
        if structure:
            judged.structure = structure
            judged.failure = self.failed(
                ctx,
                f"output structure differs from the reference ({case.label}){instance}",
                run,
                structure,
            )
            return judged
        for k, (want, got) in enumerate(zip(expected, run.outputs)):
            if not hasattr(want, "shape"):
                continue
            assessment = ctx.assess(case, k, got)
            judged.model, judged.params = assessment.model, assessment.params
            judged.worst = max(judged.worst, assessment.worst_ratio)
            if not assessment.passed and judged.failure is None:
                judged.failure = self.failed(
                    ctx,
                    f"error exceeds the {assessment.model} bound on {case.label}, output {k}: "
                    f"{assessment.worst_text}{instance}",
                    run,
                    assessment.mismatches,
                )
        return judged

    # -- timing-adversarial instances ------------------------------------------------------
    def _timing_instances(
        self, ctx: GateContext, cases: list[Case]
    ) -> tuple[GateResult | None, dict[str, Any], str]:
        """Judge ``cases`` in fresh instances whose clocks lie, and under each autotune
        config, when the main instance made a timing-dependent choice (none: nothing runs).

        Returns the first failure, the evidence and a summary for the pass reason.
        """
        seen = ctx.choice_points(self.id)
        evidence: dict[str, Any] = {
            "choice_points": [p.to_dict() for p in seen],
            "timing_instances": [],
        }
        if not seen:
            evidence["timing_note"] = (
                "no timing-dependent choice seen in the main instance (no clock read by "
                "candidate code, no benchmark, no autotuning): no fresh instance run; the "
                "hooks cannot see every clock, so this is evidence, not proof"
            )
            return None, evidence, ""
        seed = ctx.case_seed(self.id, RANDOM_SEED_INDEX)
        modes = [f"random:{seed}" if m == "random" else m for m in CLOCK_MODES]
        tuned = [p for p in seen if p.kind == "autotune"]
        for n, mode in enumerate(modes):
            more = n + 1 < len(modes) or any((p.configs or 0) > 2 for p in tuned)
            failure, points = self._instance(ctx, mode, cases, evidence, more)
            tuned += [p for p in points if p.kind == "autotune"]
            if failure is not None:
                return failure, evidence, ""
        configs = max((p.configs or 1 for p in tuned), default=1)
        indices = config_indices(configs)
        for n, i in enumerate(indices):
            more = n + 1 < len(indices)
            failure, points = self._instance(ctx, f"config:{i}", cases, evidence, more)
            tuned += [p for p in points if p.kind == "autotune"]
            if failure is not None:
                return failure, evidence, ""
        summary = f"; {len(evidence['timing_instances'])} fresh instances with lying clocks"
        if tuned:
            coverage = autotune_coverage(tuned)
            evidence["autotune_configs"] = coverage
            left_out = {k: v["not_exercised"] for k, v in coverage.items() if v["not_exercised"]}
            summary += " or forced autotune configs"
            if left_out:
                evidence["timing_note"] = (
                    f"configs not exercised (over the cap of {CONFIG_INSTANCES_CAP} config "
                    f"instances): {left_out}"
                )
                summary += f" (configs left out: {left_out})"
        return None, evidence, summary + " within the bound too"

    def _instance(
        self,
        ctx: GateContext,
        mode: str,
        cases: list[Case],
        evidence: dict[str, Any],
        more: bool,
    ) -> tuple[GateResult | None, list[ChoicePoint]]:
        """Run ``cases`` in one fresh instance with clock mode ``mode`` and judge them
        (``more``: another instance follows, so its worker starts up meanwhile)."""
        with ctx.fresh_instance(self.id, mode, prefetch=more) as session:
            runs = [ctx.run(self.id, case, session=session) for case in cases]
            points = ctx.choice_points(self.id, session)
        record: dict[str, Any] = {
            "mode": mode,
            "cases": [case.label for case in cases],
            "choice_points": [p.to_dict() for p in points],
        }
        evidence["timing_instances"].append(record)
        chosen = "; ".join(p.describe() for p in points[:6]) or "none reported"
        instance = f" in a fresh instance whose clocks run {mode} (its choice points: {chosen})"
        worst = 0.0
        for case, run in zip(cases, runs):
            judged = self._judge(ctx, case, run, instance)
            worst = max(worst, judged.worst)
            if judged.failure is not None:
                record["failed"] = case.label
                return judged.failure, points
        record["worst_error_over_bound"] = worst
        return None, points


def config_indices(configs: int, cap: int = CONFIG_INSTANCES_CAP) -> list[int]:
    """The ``config:<i>`` instances to run for autotuners of up to ``configs`` configs.

    The slower instance used each kernel's first config and the faster one its last; i in
    1 .. configs - 2 reaches every other config of every kernel (kernel a takes i mod n_a).
    Over ``cap``, ``cap`` indices spread evenly over that range.
    """
    middle = list(range(1, configs - 1))
    if len(middle) <= cap:
        return middle
    return sorted({middle[round(j * (len(middle) - 1) / (cap - 1))] for j in range(cap)})


def autotune_coverage(points: list[ChoicePoint]) -> dict[str, dict[str, Any]]:
    """Per autotuned kernel: its configs, and which of them some instance used (reported)."""
    coverage: dict[str, dict[str, Any]] = {}
    for point in points:
        if point.configs is None or point.chosen is None:
            continue
        entry = coverage.setdefault(point.what, {"configs": point.configs, "exercised": set()})
        entry["configs"] = max(entry["configs"], point.configs)
        entry["exercised"].add(point.chosen)
    return {
        name: {
            "configs": entry["configs"],
            "exercised": sorted(entry["exercised"]),
            "not_exercised": sorted(set(range(entry["configs"])) - entry["exercised"]),
        }
        for name, entry in coverage.items()
    }
