"""PRC-02: long reductions built so that an accumulator below fp32 fails.

One-signed values in [0.5, 1.5) with full fraction bits make every step of a running sum
round at the partial sum's ulp. In fp32 that error stays far inside the order bound; an
fp16 accumulator (2**13 times coarser) or a bf16 one (2**16) lands orders of magnitude
outside it at any length, so an fp16/bf16 accumulator hidden behind fp32 inputs and outputs
shows. References without a reduction are skipped with the reason.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from kernelgate.gates.base import Case, Gate, GateContext, GateKind, GateResult, Run
from kernelgate.gates.ord01_order import floating_inputs, judge_run, reduction_structure
from kernelgate.inputs.adversarial import long_positive

# (label, spread): values uniform in [1 - spread/2, 1 + spread/2)
CASES = (("positive-wide", 1.0), ("positive-narrow", 0.25))


class AccumulatorGate(Gate):
    id: ClassVar[str] = "PRC-02"
    kind: ClassVar[GateKind] = GateKind.THRESHOLDED
    title: ClassVar[str] = "accumulator precision on long reductions"
    shrinkable: ClassVar[bool] = True

    def judge_case(self, ctx: GateContext, case: Case, run: Run) -> GateResult | None:
        return judge_run(self, ctx, case, run)[2]

    def run(self, ctx: GateContext) -> GateResult:
        reduces, why = reduction_structure(ctx)
        if not reduces:
            return self.skipped(f"no reduction structure: {why}")
        per_case: dict[str, Any] = {}
        worst, params = 0.0, {}
        for index, (label, spread) in enumerate(CASES):
            seed = ctx.case_seed(self.id, index)
            # every floating input is replaced below: none is drawn only to be thrown away
            case = ctx.drawn_case(f"values={label}", seed, replaced=floating_inputs(ctx))
            case.values = [
                long_positive(
                    seed + 7919 * i, tuple(v.shape), v.dtype, spread, device=ctx.oracle.device
                )
                if isinstance(v, torch.Tensor) and v.is_floating_point()
                else v
                for i, v in enumerate(case.values)
            ]
            run = ctx.run(self.id, case)
            ratio, case_params, failure = judge_run(self, ctx, case, run)
            per_case[label] = {"worst_error_over_bound": ratio}
            worst, params = max(worst, ratio), case_params or params
            evidence = {
                "reduction": why,
                "error_model": params.get("error_model"),
                "n": params.get("n"),
                "bound": params.get("bound"),
                "accumulate_unit_roundoff": params.get("accumulate_unit_roundoff"),
                "model_params_last_case": params,
                "worst_error_over_bound": worst,
                "per_case": per_case,
            }
            if failure is not None:
                failure.reason += " (an accumulator below the promised precision?)"
                failure.evidence = evidence
                return failure
        return self.passed(
            f"{len(CASES)} long one-signed reductions within the {params.get('error_model')} "
            f"bound at N = {params.get('n')} (worst error/bound {worst:.3g})",
            evidence,
        )
