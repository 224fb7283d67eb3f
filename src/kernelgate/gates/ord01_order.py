"""ORD-01: on adversarial cancellation inputs the error stays inside the order bound.

Rows where large terms cancel exactly and small residues carry the answer
(``inputs.adversarial``) turn a lost term, a wrong reduction tree or a race-dependent sum
into an error far past the order bound, while an honest reduction (any tree, any blocking)
stays inside it. References without a reduction are skipped with the reason.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from kernelgate.contract.match import has_reduction, library_entry_of, record_ops
from kernelgate.gates.base import Case, Gate, GateContext, GateKind, GateResult, Run
from kernelgate.gates.outputs import structure_findings
from kernelgate.inputs.adversarial import PATTERNS, cancellation, ones_like_template

_OPS_CACHE: dict[tuple[str, str], list[str]] = {}


def reference_ops(ctx: GateContext) -> list[str]:
    """The aten ops the reference calls (recorded once per reference file and content)."""
    program = ctx.oracle.program
    key = (str(program.path), program.sha256)
    if key not in _OPS_CACHE:
        _OPS_CACHE[key] = record_ops(program)
    return _OPS_CACHE[key]


def reduction_structure(ctx: GateContext) -> tuple[bool, str]:
    """Whether the reference reduces (so order and accumulator precision matter), and why."""
    entry = ctx.contract.postcondition.error_model.params.get("entry")
    lib = library_entry_of(ctx.contract) if entry else None
    if lib is not None:
        if lib.reduces:
            return True, f"library entry {lib.name!r} reduces ({lib.reduction_op})"
        return False, (
            f"library entry {lib.name!r} has no reduction whose result depends on the "
            "order of operations"
        )
    ops = reference_ops(ctx)
    if has_reduction(ops):
        return True, "the reference calls a reducing op (" + ", ".join(ops) + ")"
    return False, "the reference calls no reducing op (" + (", ".join(ops) or "none") + ")"


def floating_inputs(ctx: GateContext) -> frozenset[int]:
    """Positions of the reference's floating inputs: the ones ORD-01 and PRC-02 build."""
    return frozenset(
        i
        for i, v in enumerate(ctx.template)
        if isinstance(v, torch.Tensor) and v.is_floating_point()
    )


def first_float_input(ctx: GateContext) -> int | None:
    return min(floating_inputs(ctx), default=None)


def judge_run(
    gate: Gate, ctx: GateContext, case: Case, run: Run
) -> tuple[float, dict[str, Any], GateResult | None]:
    """(worst error/bound, last model params, failure or None) for one run of ``case``."""
    expected = ctx.expected(case)
    structure = structure_findings(run.outputs, expected, ctx.output_dtypes(case))
    if structure:
        reason = f"output structure differs from the reference ({case.label})"
        return float("inf"), {}, gate.failed(ctx, reason, run, structure)
    worst, params = 0.0, {}
    for k, (want, got) in enumerate(zip(expected, run.outputs)):
        if not isinstance(want, torch.Tensor) or not got.is_floating_point():
            continue
        assessment = ctx.assess(case, k, got)
        params = {"error_model": assessment.model, **assessment.params}
        worst = max(worst, assessment.worst_ratio)
        if not assessment.passed:
            reason = (
                f"error exceeds the {assessment.model} bound on {case.label}, output {k}: "
                f"{assessment.worst_text}"
            )
            return worst, params, gate.failed(ctx, reason, run, assessment.mismatches)
    return worst, params, None


class OrderGate(Gate):
    id: ClassVar[str] = "ORD-01"
    kind: ClassVar[GateKind] = GateKind.THRESHOLDED
    title: ClassVar[str] = "order bound on adversarial cancellation"
    shrinkable: ClassVar[bool] = True

    def judge_case(self, ctx: GateContext, case: Case, run: Run) -> GateResult | None:
        return judge_run(self, ctx, case, run)[2]

    def run(self, ctx: GateContext) -> GateResult:
        reduces, why = reduction_structure(ctx)
        if not reduces:
            return self.skipped(f"no reduction structure: {why}")
        target = first_float_input(ctx)
        if target is None:
            return self.skipped("the reference has no floating-point input to build rows in")
        per_pattern: dict[str, Any] = {}
        worst, params = 0.0, {}
        for index, pattern in enumerate(PATTERNS):
            if ctx.focused_out(self.id, f"pattern={pattern}"):  # a replay of another case
                continue
            seed = ctx.case_seed(self.id, index)
            # every floating input is replaced below: none is drawn only to be thrown away
            case = ctx.drawn_case(f"pattern={pattern}", seed, replaced=floating_inputs(ctx))
            case.values = [
                (
                    cancellation(pattern, seed, tuple(v.shape), v.dtype, device=ctx.oracle.device)
                    if i == target
                    else ones_like_template(v)
                )
                if isinstance(v, torch.Tensor) and v.is_floating_point()
                else v
                for i, v in enumerate(case.values)
            ]
            run = ctx.run(self.id, case)
            ratio, case_params, failure = judge_run(self, ctx, case, run)
            per_pattern[pattern] = {"worst_error_over_bound": ratio}
            worst, params = max(worst, ratio), case_params or params
            if failure is not None:
                failure.evidence = self._evidence(why, params, worst, per_pattern)
                return failure
        return self.passed(
            f"{len(PATTERNS)} cancellation patterns within the {params.get('error_model')} "
            f"bound (worst error/bound {worst:.3g})",
            self._evidence(why, params, worst, per_pattern),
        )

    @staticmethod
    def _evidence(
        why: str, params: dict[str, Any], worst: float, per_pattern: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "reduction": why,
            "error_model": params.get("error_model"),
            "n": params.get("n"),
            "bound": params.get("bound"),
            "model_params_last_case": params,
            "worst_error_over_bound": worst,
            "per_pattern": per_pattern,
        }
