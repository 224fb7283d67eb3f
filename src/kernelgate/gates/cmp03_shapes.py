"""CMP-03: correct on held-out shapes of the contract's domain.

The reference's module-level sizes are rebound (``ReferenceProgram.rebound``) to values drawn
from the contract's dims (``inputs.shapes``: size 1, block size +- 1, primes, non-powers of
two, large), ``get_inputs``/``get_init_inputs`` are called again, and when the init inputs
change both the candidate (in the worker) and the oracle model are rebuilt with KernelBench's
seeding. The shapes are spread over every varying dim, batch-like leading dims first
(``inputs.shapes.choose``); the evidence lists the dims varied and, for every other dim, why
not (the contract fixes it, it is not rebindable, nothing admitted fits the caps, the case
budget ran out). Outputs are judged through ``ctx.assess``. On failure the evidence states
the sub-domain that passed, per dim, in contract form (min/max/multiple_of, or the dim
fixed), confirmed by up to ``CONFIRM_ROUNDS`` extra shapes inside it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, ClassVar

import torch

from kernelgate.domain import SUB_DOMAIN, describe_dim, refusal_counterexample, run_or_refusal
from kernelgate.gates.base import Case, Gate, GateContext, GateKind, GateResult, Status
from kernelgate.gates.outputs import structure_findings
from kernelgate.inputs.footprint import FootprintLimit
from kernelgate.inputs.shapes import (
    CPU_ELEMENT_CAP,
    DEVICE_ELEMENT_CAP,
    LARGE_FACTOR,
    ShapePoint,
    batch_like,
    case_budget,
    choose,
    input_elements,
    sizes_an_input,
    sub_dim,
)

CONFIRM_ROUNDS = 2  # extra shapes run inside a proposed sub-domain before stating it


class ShapesGate(Gate):
    id: ClassVar[str] = "CMP-03"
    kind: ClassVar[GateKind] = GateKind.THRESHOLDED
    title: ClassVar[str] = "held-out shapes"

    def run(self, ctx: GateContext) -> GateResult:
        program = ctx.oracle.program
        varying = [d for d in ctx.contract.dims if d.varies]
        # dim -> why no held-out shape moves it: the contract's reason, then the gate's
        not_varied = {
            d.name: f"fixed by the contract: {d.fixed_because or 'no reason stated'}"
            for d in ctx.contract.dims
            if not d.varies
        }
        if not varying:
            return self.skipped(
                "the contract fixes every dim: no held-out shape is admitted"
                + "".join(f"; {name} {why}" for name, why in not_varied.items())
            )
        rebindable = [d for d in varying if d.name in program.sizes]
        unbound = [d.name for d in varying if d.name not in program.sizes]
        not_varied |= {name: "not a module-level size of the reference" for name in unbound}
        if not rebindable:
            return self.skipped(
                f"no varying dim ({', '.join(unbound)}) is a module-level size of the "
                "reference, so other shapes cannot be built from it"
            )
        cap = CPU_ELEMENT_CAP if ctx.session.device == "cpu" else DEVICE_ELEMENT_CAP
        self._footprint = FootprintLimit(
            program,
            cap,
            frozenset(d.name for d in rebindable if sizes_an_input(ctx.contract, d.name)),
        )
        plan = choose(
            ctx.contract, rebindable, ctx.case_seed(self.id, -1), cap, self._footprint.admits
        )
        points, pools = plan.points, plan.pools
        not_varied |= plan.unvaried
        self._ctx, self._results, self._first_failure = ctx, [], None
        self._worst, self._model, self._params = 0.0, "", {}
        for index, point in enumerate(points):
            self._try(point, index)
        dims = {d.name: d for d in rebindable}
        confirmations: list[dict[str, Any]] = []
        sub = self._sub_domain(dims)
        unsettled: set[str] = set()
        for _ in range(CONFIRM_ROUNDS):
            fresh = self._confirmation_points(sub, dims, pools) if sub else []
            if not fresh:
                unsettled = set()
                break
            records = [self._try(p, len(self._results) + 100) for p in fresh]
            confirmations += records
            sub = self._sub_domain(dims)
            unsettled = {r["dim"] for r in records if r["status"] == "fail"}
            if not unsettled:
                break
        for name in unsettled:  # a confirmation still failed: claim only the reference size
            ref = dims[name].reference
            sub[name] = {"min": ref, "max": ref, "multiple_of": 1, "varies": False}
        evidence: dict[str, Any] = {
            "error_model": self._model or "ensemble",
            "bound_last_case": self._params.get("bound"),
            "model_params_last_case": self._params,
            "worst_error_over_bound": self._worst,
            "element_cap": cap,
            "element_cap_mode": "cpu (Triton interpreter)"
            if ctx.session.device == "cpu"
            else "device",
            "large_factor": LARGE_FACTOR,
            **self._footprint.evidence(),
            "max_cases": case_budget(len(rebindable)),
            "shapes": self._results,
            "pools": pools,
            "dim_order": plan.order,
            "batch_like_dims": [n for n in plan.order if batch_like(ctx.contract, n)],
            "dims_varied": list(dict.fromkeys(p.dim for p in points)),
            "dims_not_varied": not_varied,
            "dims_not_rebindable": unbound,
            "confirmations": [c["label"] for c in confirmations if c],
        }
        judged = [r for r in self._results if r["status"] in ("pass", "fail")]
        if self._first_failure is not None:
            evidence[SUB_DOMAIN] = {"dims": sub} if sub else None
            narrowed = "; ".join(
                describe_dim(replace(dims[name], **fields)) for name, fields in sub.items()
            )
            self._first_failure.reason += f" (passing sub-domain: {narrowed or 'none'})"
            self._first_failure.evidence = evidence
            return self._first_failure
        if not judged:
            return self.skipped(
                "the reference could not be evaluated at any held-out shape: "
                + "; ".join(f"{r['label']}: {r.get('detail', '')}" for r in self._results)
            )
        unmoved = f"; not varied: {', '.join(not_varied)}" if not_varied else ""
        return self.passed(
            f"{len(judged)} held-out shapes ({', '.join(r['label'] for r in judged)}) within "
            f"the {evidence['error_model']} bound (worst error/bound {self._worst:.3g})" + unmoved,
            evidence,
        )

    # -- one shape ------------------------------------------------------------------------
    def _try(self, point: ShapePoint, index: int) -> dict[str, Any]:
        ctx = self._ctx
        record: dict[str, Any] = {
            "label": point.label,
            "dim": point.dim,
            "value": point.value,
            "family": point.family,
        }
        self._results.append(record)
        try:
            case = ctx.sized_case(
                point.label, ctx.case_seed(self.id, index), {point.dim: point.value}
            )
            expected, dtypes = ctx.expected(case), ctx.output_dtypes(case)
        except Exception as exc:  # the trusted reference itself cannot run here: not judged
            record.update(status="reference-failed", detail=f"{type(exc).__name__}: {exc}"[:300])
            return record
        record["input_elements"] = input_elements(ctx.contract, {point.dim: point.value})
        record["rebuilt_model"] = case.init_inputs is not None
        outcome = run_or_refusal(ctx, self.id, case, point.label)
        if isinstance(outcome, dict):
            record.update(status="fail", raised=outcome["detail"])
            self._fail(
                self.result(
                    Status.FAIL,
                    f"candidate raised at {point.label}",
                    counterexample=refusal_counterexample(
                        ctx, self.id, case, outcome, case.describe()
                    ),
                )
            )
            return record
        structure = structure_findings(outcome.outputs, expected, dtypes)
        if structure:
            record.update(status="fail", structure=structure)
            self._fail(
                self.failed(
                    ctx,
                    f"output structure differs from the reference at {point.label}",
                    outcome,
                    structure,
                )
            )
            return record
        worst = 0.0
        for k, (want, got) in enumerate(zip(expected, outcome.outputs)):
            if not isinstance(want, torch.Tensor):
                continue
            assessment = self._assess(case, k, got)
            worst = max(worst, assessment.worst_ratio)
            if not assessment.passed:
                record["status"] = "fail"
                self._fail(
                    self.failed(
                        ctx,
                        f"wrong at {point.label}: error exceeds the {assessment.model} bound "
                        f"on output {k} ({assessment.worst_text})",
                        outcome,
                        assessment.mismatches,
                    )
                )
        record.setdefault("status", "pass")
        record["worst_error_over_bound"] = worst
        self._worst = max(self._worst, worst)
        return record

    def _assess(self, case: Case, k: int, got: torch.Tensor) -> Any:
        assessment = self._ctx.assess(case, k, got)
        self._model, self._params = assessment.model, assessment.params
        return assessment

    def _fail(self, result: GateResult) -> None:
        if self._first_failure is None:
            self._first_failure = result

    # -- the sub-domain -------------------------------------------------------------------
    def _sub_domain(self, dims: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """Per dim with a failing shape, the restriction that keeps every tested pass."""
        sub: dict[str, dict[str, Any]] = {}
        for name, dim in dims.items():
            mine = [r for r in self._results if r["dim"] == name]
            failing = [r["value"] for r in mine if r["status"] == "fail"]
            if not failing:
                continue
            passing = [r["value"] for r in mine if r["status"] == "pass"]
            narrowed = sub_dim(dim, passing, failing)
            sub[name] = {
                "min": narrowed.min,
                "max": narrowed.max,
                "multiple_of": narrowed.multiple_of,
                "varies": narrowed.varies,
            }
        return sub

    def _confirmation_points(
        self, sub: dict[str, dict[str, Any]], dims: dict[str, Any], pools: dict[str, Any]
    ) -> list[ShapePoint]:
        """One untested value per narrowed dim that the proposed sub-domain admits."""
        tested = {(r["dim"], r["value"]) for r in self._results}
        fresh = []
        for name, fields in sub.items():
            dim = dims[name]
            narrowed = replace(dim, **fields)
            if not narrowed.varies:
                continue
            candidates = sorted(
                {v for pool in pools.get(name, {}).values() for v in pool}
                | {dim.reference * 2, dim.reference + narrowed.multiple_of}
                | {
                    dim.reference - narrowed.multiple_of,
                    -(-narrowed.min // narrowed.multiple_of) * narrowed.multiple_of,
                },
                reverse=True,
            )
            # Not above what the plan itself reached for this dim (or twice the reference):
            # a confirmation re-checks a proposed sub-domain, and the pools' largest size,
            # which the case budget left untried, would be the verification's most costly
            # case. On the H200 a confirmation at head_dim=4096 made a causal attention
            # kernel compile a 32 x 4096 tile for minutes.
            reached = max(
                (r["value"] for r in self._results if r["dim"] == name), default=dim.reference
            )
            eligible = [
                value
                for value in candidates
                if value <= max(reached, 2 * dim.reference)
                and value != dim.reference
                and (narrowed.admits(value) and (name, value) not in tested)
            ]
            # the largest affordable one, measured upwards: above the reference, the first
            # refused size refuses every larger one unmeasured (``FootprintLimit``)
            affordable = [v for v in sorted(eligible) if self._footprint.admits(name, v)]
            if affordable:
                fresh.append(ShapePoint(name, max(affordable), "confirm"))
        return fresh
