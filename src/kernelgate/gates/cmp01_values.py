"""CMP-01: correct over many input distributions at the reference shape."""

from __future__ import annotations

from typing import Any, ClassVar

from kernelgate.gates.base import Gate, GateContext, GateKind, GateResult
from kernelgate.gates.outputs import structure_findings
from kernelgate.inputs.distributions import DISTRIBUTIONS


class ValuesGate(Gate):
    id: ClassVar[str] = "CMP-01"
    kind: ClassVar[GateKind] = GateKind.THRESHOLDED
    title: ClassVar[str] = "values over input distributions"

    def run(self, ctx: GateContext) -> GateResult:
        per_distribution: dict[str, Any] = {}
        first_failure: GateResult | None = None
        worst = 0.0
        model_params: dict[str, Any] = {}
        model = ctx.contract.postcondition.error_model.name
        for index, distribution in enumerate(DISTRIBUTIONS):
            case = ctx.drawn_case(
                f"distribution={distribution}", ctx.case_seed(self.id, index), distribution
            )
            run = ctx.run(self.id, case)
            expected = ctx.expected(case)
            structure = structure_findings(run.outputs, expected, ctx.native(case))
            if structure:
                per_distribution[distribution] = {"structure": structure}
                first_failure = first_failure or self.failed(
                    ctx,
                    f"output structure differs from the reference ({case.label})",
                    run,
                    structure,
                )
                continue
            ratios = []
            for k, (want, got) in enumerate(zip(expected, run.outputs)):
                if not hasattr(want, "shape"):
                    continue
                assessment = ctx.assess(case, k, got)
                model, model_params = assessment.model, assessment.params
                ratios.append(assessment.worst_ratio)
                if not assessment.passed and first_failure is None:
                    first_failure = self.failed(
                        ctx,
                        f"error exceeds the {assessment.model} bound on {case.label}, output {k}: "
                        f"{assessment.worst_text}",
                        run,
                        assessment.mismatches,
                    )
            worst_here = max(ratios, default=0.0)
            worst = max(worst, worst_here)
            per_distribution[distribution] = {"worst_error_over_bound": worst_here}
        evidence = {
            "error_model": model,
            "model_params_last_case": model_params,
            "worst_error_over_bound": worst,
            "per_distribution": per_distribution,
        }
        if first_failure is not None:
            first_failure.evidence = evidence
            return first_failure
        return self.passed(
            f"{len(DISTRIBUTIONS)} distributions within the {model} bound "
            f"(worst error/bound {worst:.3g})",
            evidence,
        )
