"""CMP-02: correct for every memory layout the contract admits, at the reference shape.

Benchmarks send contiguous, aligned tensors; real callers send slices, transposes,
broadcasts and tensors at odd storage offsets. For each admitted layout this gate places the
same logical values that way (``inputs.layouts``), runs the candidate and judges the output
against the fp64 oracle through ``ctx.assess``. Misaligned offsets are always tried where the
contract admits offsets, alone and combined with every other layout. On failure the evidence
states the sub-domain that passed (the layouts kept per input), so a verdict can be narrowed.

A candidate that faults (a misaligned or illegal address, a fault signal: ``domain.fault_of``)
on a layout the reference's own inputs never have fails that case as it would by raising;
the evidence's ``unguarded_precondition`` names the faults and the layouts they happened on,
and the session's next call starts a fresh worker. At the reference's own layouts nothing is
excused: any incident aborts the gate and RES-01 rejects.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from kernelgate.contract.spec import Layout, TensorSpec
from kernelgate.domain import SUB_DOMAIN, UNGUARDED, refusal_counterexample, run_or_refusal
from kernelgate.gates.base import Case, Gate, GateContext, GateKind, GateResult, Run, Status
from kernelgate.gates.outputs import structure_findings
from kernelgate.inputs.layouts import (
    VIEW_LAYOUTS,
    applicable,
    can_misalign,
    expandable,
    layout_of,
    place_layout,
)
from kernelgate.inputs.placement import POISONS, PlacedTensor


@dataclass
class LayoutPlan:
    """One CMP-02 case: which layout each tensor input gets, and whether it is misaligned."""

    layout: Layout
    misaligned: bool
    per_input: list[tuple[Layout, bool]]  # per tensor input, in order

    @property
    def label(self) -> str:
        if self.layout is Layout.OFFSET:
            return "layout=offset (16-byte misaligned)"
        return f"layout={self.layout.value}" + (" +misaligned" if self.misaligned else "")


def tensor_specs(ctx: GateContext) -> list[TensorSpec | None]:
    """The contract's spec for each tensor in the reference's inputs (None if unknown)."""
    tensors = [v for v in ctx.template if isinstance(v, torch.Tensor)]
    if len(ctx.contract.inputs) == len(ctx.template):
        specs = [
            s for s, v in zip(ctx.contract.inputs, ctx.template) if isinstance(v, torch.Tensor)
        ]
        return [s if isinstance(s, TensorSpec) else None for s in specs]
    by_order: list[TensorSpec | None] = list(ctx.contract.tensor_inputs)
    return (by_order + [None] * len(tensors))[: len(tensors)]


def plans(ctx: GateContext) -> tuple[list[LayoutPlan], list[str]]:
    """The cases to run, and the admitted layouts that do not apply at this shape."""
    tensors = [v for v in ctx.template if isinstance(v, torch.Tensor)]
    specs = tensor_specs(ctx)
    in_place = set(ctx.contract.postcondition.in_place)

    def admits(spec: TensorSpec | None, layout: Layout) -> bool:
        return spec is not None and layout in spec.layouts

    def misalignable(spec: TensorSpec | None, value: torch.Tensor) -> bool:
        return admits(spec, Layout.OFFSET) and can_misalign(value.dtype)

    result: list[LayoutPlan] = []
    not_applicable: list[str] = []
    offset = [(Layout.CONTIGUOUS, misalignable(s, v)) for s, v in zip(specs, tensors)]
    if any(m for _, m in offset):
        result.append(LayoutPlan(Layout.OFFSET, True, offset))
    for layout in VIEW_LAYOUTS:
        chosen = []
        for spec, value in zip(specs, tensors):
            usable = admits(spec, layout) and applicable(layout, tuple(value.shape))
            if layout is Layout.EXPANDED:  # a broadcast cannot be written or hold free values
                usable &= value.is_floating_point() and (spec is None or spec.name not in in_place)
            chosen.append(usable)
        if not any(chosen):
            if any(admits(s, layout) for s in specs):
                not_applicable.append(layout.value)
            continue
        for misaligned in (False, True):
            per_input = [
                (layout, misaligned and misalignable(s, v)) if use else (Layout.CONTIGUOUS, False)
                for use, s, v in zip(chosen, specs, tensors)
            ]
            if misaligned and not any(m for _, m in per_input):
                continue
            result.append(LayoutPlan(layout, misaligned, per_input))
    return result, not_applicable


def at_reference_layout(ctx: GateContext, plan: LayoutPlan) -> bool:
    """Whether ``plan`` places every input as the reference's own ``get_inputs`` has it."""
    own = [layout_of(v) for v in ctx.template if isinstance(v, torch.Tensor)]
    return list(plan.per_input) == own


def placer(
    plan: LayoutPlan, poison: int, device: str | None = None
) -> Callable[[torch.Tensor], PlacedTensor]:
    """A ``place`` function for ``ctx.run``: tensors arrive in order, one layout each, in
    storages on ``device`` (``GateContext.placement_device``)."""
    queue = list(plan.per_input)

    def place(value: torch.Tensor) -> PlacedTensor:
        layout, misaligned = queue.pop(0) if queue else (Layout.CONTIGUOUS, False)
        return place_layout(value, layout, misaligned=misaligned, poison=poison, device=device)

    return place


class LayoutsGate(Gate):
    id: ClassVar[str] = "CMP-02"
    kind: ClassVar[GateKind] = GateKind.THRESHOLDED
    title: ClassVar[str] = "layouts: offsets, strides, transposes, broadcasts"

    def run(self, ctx: GateContext) -> GateResult:
        todo, not_applicable = plans(ctx)
        if not todo:
            return self.skipped(
                "the contract admits only contiguous, 16-byte-aligned inputs at this shape "
                "(that layout is CMP-01's)"
                + (f"; not applicable here: {', '.join(not_applicable)}" if not_applicable else "")
            )
        per_layout: dict[str, Any] = {}
        failures: list[tuple[LayoutPlan, GateResult]] = []
        worst, model, params = 0.0, "", {}
        faulted: dict[str, str] = {}  # layout label: the fault (``unguarded_precondition``)
        for index, plan in enumerate(todo):
            if ctx.focused_out(self.id, plan.label):  # a replay of another case
                continue
            case = self._case(ctx, plan, index)
            place = placer(plan, POISONS[0], ctx.placement_device(ctx.session))
            if at_reference_layout(ctx, plan):  # no refusal or fault is excused here
                outcome: Run | dict[str, Any] = ctx.run(self.id, case, place=place)
            else:
                outcome = run_or_refusal(ctx, self.id, case, plan.label, place, faults=True)
            if isinstance(outcome, dict):
                if outcome["problem"] == "faulted":
                    faulted[plan.label] = outcome["fault"]
                    per_layout[plan.label] = {"status": "fail", "faulted": outcome["fault"]}
                    what = f"candidate faulted on {plan.label} ({outcome['fault']})"
                else:
                    per_layout[plan.label] = {"status": "fail", "raised": outcome["detail"]}
                    what = f"candidate raised on {plan.label}"
                inputs = self._placed(case, plan)
                failures.append(
                    (
                        plan,
                        self.result(
                            Status.FAIL,
                            what,
                            counterexample=refusal_counterexample(
                                ctx, self.id, case, outcome, inputs
                            ),
                        ),
                    )
                )
                continue
            verdict = self._judge(ctx, case, outcome, plan)
            per_layout[plan.label] = verdict["summary"]
            if verdict["assessment"] is not None:
                model, params = verdict["assessment"].model, verdict["assessment"].params
            worst = max(worst, verdict["summary"].get("worst_error_over_bound", 0.0))
            if verdict["failure"] is not None:
                failures.append((plan, verdict["failure"]))
        evidence: dict[str, Any] = {
            "error_model": model or "ensemble",
            "bound_last_case": params.get("bound"),
            "model_params_last_case": params,
            "worst_error_over_bound": worst,
            "per_layout": per_layout,
            "not_applicable": not_applicable,
            "admitted": {s.name: [lay.value for lay in s.layouts] for s in tensor_specs(ctx) if s},
        }
        if faulted:
            evidence[UNGUARDED] = {
                "faults": sorted(set(faulted.values())),
                "layouts": list(faulted),
                "summary": "; ".join(
                    f"{fault} on {', '.join(lab for lab, f in faulted.items() if f == fault)}"
                    for fault in dict.fromkeys(faulted.values())
                ),
            }
        if failures:
            evidence[SUB_DOMAIN] = {"layouts": self._kept(ctx, todo, [p for p, _ in failures])}
            first = failures[0][1]
            first.evidence = evidence
            return first
        return self.passed(
            f"{len(todo)} layout cases ({', '.join(p.label for p in todo)}) within the "
            f"{evidence['error_model']} bound (worst error/bound {worst:.3g})",
            evidence,
        )

    def _case(self, ctx: GateContext, plan: LayoutPlan, index: int) -> Case:
        case = ctx.drawn_case(plan.label, ctx.case_seed(self.id, index))
        if plan.layout is Layout.EXPANDED:
            queue = list(plan.per_input)
            values = []
            for value in case.values:
                if isinstance(value, torch.Tensor):
                    layout, _ = queue.pop(0)
                    value = expandable(value) if layout is Layout.EXPANDED else value
                values.append(value)
            case.values = values
        return case

    @staticmethod
    def _placed(case: Case, plan: LayoutPlan) -> list[dict[str, Any]]:
        """How each input of a case the candidate raised or faulted on was placed (shape,
        stride, storage offset, misalignment): no run to take it from, so placed again."""
        place, misaligned = placer(plan, POISONS[0]), [mis for _, mis in plan.per_input]
        described: list[dict[str, Any]] = []
        for value in case.values:
            if isinstance(value, torch.Tensor):
                mis = misaligned.pop(0) if misaligned else False
                described.append({**place(value).describe(), "misaligned": mis})
            else:
                described.append({"value": repr(value)})
        return described

    def _judge(self, ctx: GateContext, case: Case, run: Run, plan: LayoutPlan) -> dict[str, Any]:
        expected = ctx.expected(case)
        structure = structure_findings(run.outputs, expected, ctx.output_dtypes(case))
        if structure:
            return {
                "summary": {"status": "fail", "structure": structure},
                "assessment": None,
                "failure": self.failed(
                    ctx,
                    f"output structure differs from the reference on {plan.label}",
                    run,
                    structure,
                ),
            }
        worst, failure, last = 0.0, None, None
        for k, (want, got) in enumerate(zip(expected, run.outputs)):
            if not isinstance(want, torch.Tensor):
                continue
            assessment = ctx.assess(case, k, got)
            last = assessment
            worst = max(worst, assessment.worst_ratio)
            if not assessment.passed and failure is None:
                failure = self.failed(
                    ctx,
                    f"wrong on {plan.label}: error exceeds the {assessment.model} bound on "
                    f"output {k} ({assessment.worst_text}); the "
                    "contract admits this layout",
                    run,
                    assessment.mismatches,
                )
        summary = {"status": "fail" if failure else "pass", "worst_error_over_bound": worst}
        return {"summary": summary, "assessment": last, "failure": failure}

    @staticmethod
    def _kept(ctx: GateContext, todo: list[LayoutPlan], failed: list[LayoutPlan]) -> dict:
        """Per input, the admitted layouts no failing case used (contiguous always stays)."""
        bad = {p.layout for p in failed}  # a layout goes if any of its cases failed
        kept: dict[str, list[str]] = {}
        for spec in tensor_specs(ctx):
            if spec is None:
                continue
            kept[spec.name] = [
                lay.value for lay in spec.layouts if lay is Layout.CONTIGUOUS or lay not in bad
            ]
        return kept
