"""PRC-01: for every declared dtype, the output dtype is exact and the error fits its bound.

The contract lists the dtypes each floating input admits (a library entry admits fp32,
fp16 and bf16; a derived KernelBench contract usually only the reference's own). For each,
the candidate runs on inputs of that dtype: its output dtype must be the one the reference
produces for them, and its error must fit that dtype's bound under the contract's error
model. A silent downcast (fp32 I/O computed in fp16/bf16) or TF32 products where IEEE fp32
is promised exceed the fp32 bound; a wrong output dtype is a structure failure.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from kernelgate.contract.spec import TensorSpec
from kernelgate.domain import SUB_DOMAIN, refusal_counterexample, run_or_refusal
from kernelgate.gates.base import Gate, GateContext, GateKind, GateResult, Status
from kernelgate.gates.ord01_order import judge_run


def declared_dtypes(ctx: GateContext) -> list[torch.dtype]:
    """The floating dtypes the contract admits, the reference's own first."""
    own = [v.dtype for v in ctx.template if isinstance(v, torch.Tensor) and v.is_floating_point()]
    names: list[str] = []
    for spec in ctx.contract.inputs:
        if isinstance(spec, TensorSpec) and spec.integer_values is None:
            names += [d for d in spec.dtypes if d not in names]
    declared = [
        getattr(torch, n) for n in names if isinstance(getattr(torch, n, None), torch.dtype)
    ]
    ordered = list(dict.fromkeys(own[:1] + declared))
    return [d for d in ordered if d.is_floating_point]


def case_dtypes(ctx: GateContext, dtype: torch.dtype) -> list[torch.dtype | None]:
    """Per input, the dtype its values get in the run at ``dtype``: ``dtype`` where the
    contract admits it for that input, else (None) the input's own.

    A reference whose floating inputs differ in dtype (an fp8 tensor and its float32 scale)
    is judged at its own dtypes, not with every input cast to the first one's: an fp8 scale
    is another function, and often one torch refuses (no promotion between float8 and float).
    An input the contract says nothing about takes ``dtype``, as every input did before.
    """
    specs = ctx.contract.inputs
    return [
        None
        if (
            i < len(specs)
            and isinstance(specs[i], TensorSpec)
            and str(dtype).removeprefix("torch.") not in specs[i].dtypes
        )
        else dtype
        for i in range(len(ctx.template))
    ]


def has_float_state(ctx: GateContext) -> bool:
    model = ctx.oracle.model
    return any(t.is_floating_point() for t in [*model.parameters(), *model.buffers()])


class PrecisionGate(Gate):
    id: ClassVar[str] = "PRC-01"
    kind: ClassVar[GateKind] = GateKind.THRESHOLDED
    title: ClassVar[str] = "precision per declared dtype"

    def run(self, ctx: GateContext) -> GateResult:
        dtypes = declared_dtypes(ctx)
        if not dtypes:
            return self.skipped("the reference has no floating-point input")
        own = dtypes[0]
        per_dtype: dict[str, Any] = {}
        not_run: dict[str, str] = {}
        failures: dict[str, GateResult] = {}
        worst, params = 0.0, {}
        for index, dtype in enumerate(dtypes):
            name = str(dtype).removeprefix("torch.")
            why_not = self._cannot_run(ctx, dtype, own)
            if why_not:
                not_run[name] = why_not
                continue
            seed = ctx.case_seed(self.id, index)
            case = ctx.drawn_case(f"dtype={name}", seed, dtype=case_dtypes(ctx, dtype))
            outcome = run_or_refusal(ctx, self.id, case, f"dtype={name}")
            if isinstance(outcome, dict):  # a clean exception: the dtype is refused
                per_dtype[name] = {"refused": outcome["detail"]}
                failure = self.result(
                    Status.FAIL,
                    f"the candidate raised on {case.label}",
                    counterexample=refusal_counterexample(
                        ctx, self.id, case, outcome, case.describe()
                    ),
                )
            else:
                ratio, case_params, failure = judge_run(self, ctx, case, outcome)
                per_dtype[name] = {
                    "worst_error_over_bound": ratio,
                    "error_model": case_params.get("error_model"),
                    "bound": case_params.get("bound"),
                    "n": case_params.get("n"),
                }
                worst, params = max(worst, ratio), case_params or params
            if failure is None:
                continue
            if dtype == own:  # the reference's own dtype: no sub-domain keeps the kernel
                failure.evidence = self._evidence(per_dtype, not_run, worst, params)
                return failure
            failures[name] = failure
        if failures:
            return self._narrowing_failure(ctx, failures, per_dtype, not_run, worst, params)
        if not per_dtype:
            return self.skipped("no declared dtype can be run: " + "; ".join(not_run.values()))
        extra = (
            f"; not run: {', '.join(f'{k} ({v})' for k, v in not_run.items())}" if not_run else ""
        )
        return self.passed(
            f"output dtype exact and error within bound for {', '.join(per_dtype)} "
            f"(worst error/bound {worst:.3g}){extra}",
            self._evidence(per_dtype, not_run, worst, params),
        )

    @staticmethod
    def _cannot_run(ctx: GateContext, dtype: torch.dtype, own: torch.dtype) -> str | None:
        if dtype == own:
            return None
        if has_float_state(ctx):
            return (
                "the model has floating parameters; running it at another dtype needs the "
                "weights cast in the worker, which is not implemented"
            )
        tags = ctx.contract.postcondition.error_model.params.get("entry")
        on_cpu = ctx.session.device == "cpu"
        if on_cpu and dtype == torch.bfloat16 and tags in ("matmul", "linear", "conv"):
            return "bf16 tl.dot is wrong under the Triton interpreter (CPU mode)"
        return None

    def _narrowing_failure(
        self,
        ctx: GateContext,
        failures: dict[str, GateResult],
        per_dtype: dict[str, Any],
        not_run: dict[str, str],
        worst: float,
        params: dict[str, Any],
    ) -> GateResult:
        """Failed only at dtypes other than the reference's: state the dtypes that passed."""
        first = next(iter(failures.values()))
        passing = [name for name in per_dtype if name not in failures]
        first.reason = (
            f"wrong at {', '.join(failures)}: {first.reason} "
            f"(passing sub-domain: dtypes {', '.join(passing)})"
        )
        first.evidence = self._evidence(per_dtype, not_run, worst, params)
        first.evidence[SUB_DOMAIN] = {
            "dtypes": {
                spec.name: [d for d in spec.dtypes if d in passing]
                for spec in ctx.contract.inputs
                if isinstance(spec, TensorSpec) and spec.integer_values is None
            }
        }
        return first

    @staticmethod
    def _evidence(
        per_dtype: dict[str, Any], not_run: dict[str, str], worst: float, params: dict[str, Any]
    ) -> dict[str, Any]:
        return {
            "dtypes": per_dtype,
            "not_run": not_run,
            "error_model": params.get("error_model"),
            "bound": params.get("bound"),
            "n": params.get("n"),
            "model_params_last_case": params,
            "worst_error_over_bound": worst,
        }
