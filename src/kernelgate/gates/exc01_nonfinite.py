"""EXC-01: NaN and +-Inf travel from inputs to outputs exactly as the fp64 oracle says.

Trials come in two densities (``inputs.specials``): scattered specials (about 1% of each
input, and whole rows) reach every code path; sparse ones (exactly one per tensor, exactly
one per row, each kind on its own) keep a single Inf from meeting another of the opposite
sign in a dot product or a reduction, where ``inf - inf`` would make the oracle's answer NaN
and hide what the kernel does with an Inf (a log-sum-exp whose max is +Inf, say).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from kernelgate.contract.spec import TensorSpec, ValueDomain
from kernelgate.gates.base import Case, Gate, GateContext, GateKind, GateResult, Run
from kernelgate.gates.outputs import ClassJudgement, PositionCounts, structure_findings
from kernelgate.inputs.specials import SPECIALS, Density, inject, special_kinds
from kernelgate.oracle.compare import (
    MAX_POSITIONS,
    ValueClass,
    first_positions,
    scalar,
    value_classes,
)

# (special kind, density) per trial: scattered single kinds, whole rows, then one special of
# each kind per tensor and per row.
TRIALS: list[tuple[str, Density]] = [
    ("nan", Density.SCATTERED),
    ("+inf", Density.SCATTERED),
    ("-inf", Density.SCATTERED),
    ("mixed", Density.WHOLE_ROW),
    ("nan", Density.WHOLE_ROW),
    *(
        (kind, density)
        for density in (Density.ONE_PER_TENSOR, Density.ONE_PER_ROW)
        for kind in ("nan", "+inf", "-inf")
    ),
]


def holds(dtype: torch.dtype, kind: str) -> bool:
    """Whether a tensor of ``dtype`` can hold the special ``kind`` ("mixed": any)."""
    kinds = special_kinds(dtype)
    return bool(kinds) if kind == "mixed" else kind in kinds


def trial_label(kind: str, density: Density) -> str:
    return f"inject={kind}" + ("" if density is Density.SCATTERED else f" {density.value}")


@dataclass
class _Tally(PositionCounts):
    """What EXC-01's trials judged so far, for its evidence."""

    judged: int = 0
    excluded: int = 0
    consulted: int = 0
    probed: int = 0
    refined: int = 0
    completed: int = 0


class NonFiniteGate(Gate):
    id: ClassVar[str] = "EXC-01"
    kind: ClassVar[GateKind] = GateKind.EXACT
    title: ClassVar[str] = "non-finite propagation"
    shrinkable: ClassVar[bool] = True

    def run(self, ctx: GateContext) -> GateResult:
        if not ctx.propagates_specials:
            return self.skipped("the contract's exceptional-value policy promises nothing")
        targets = self._injectable(ctx)
        if not targets:
            return self.skipped(
                "no floating-point input admits NaN or Inf under the contract (or its dtype)"
            )
        tally = _Tally()
        run_trials: list[str] = []
        for index, (kind, density) in enumerate(TRIALS):
            # only into inputs whose dtype holds the kind: float8_e4m3fn has NaN but no Inf
            holders = {i for i in targets if holds(ctx.template[i].dtype, kind)}
            if not holders:
                continue
            if ctx.focused_out(self.id, trial_label(kind, density)):  # a replay of another
                continue
            run_trials.append(trial_label(kind, density).removeprefix("inject="))
            seed = ctx.case_seed(self.id, index)
            case = ctx.drawn_case(trial_label(kind, density), seed)
            case.values = [
                inject(v, kind, seed + 7919 * i, density) if i in holders else v
                for i, v in enumerate(case.values)
            ]
            failure = self._judge_trial(ctx, case, ctx.run(self.id, case), tally)
            if failure is not None:
                return failure
        judged, excluded = tally.judged, tally.excluded
        consulted, probed = tally.consulted, tally.probed
        evidence: dict[str, Any] = {
            "judged_positions": judged,
            "excluded_honest_disagreement": excluded,
            "second_implementation_consulted": consulted,
            "dependence_probe_consulted": probed,
            "dependence_probe_refined": tally.refined,
            "dependence_probe_completed": tally.completed,
            "trials": run_trials,
        }
        absent = sorted(
            {k for k in SPECIALS if not any(holds(ctx.template[i].dtype, k) for i in targets)}
        )
        if absent:
            evidence["not_injected"] = {
                kind: "no input's dtype holds it ("
                + ", ".join(
                    sorted({str(ctx.template[i].dtype).removeprefix("torch.") for i in targets})
                )
                + ")"
                for kind in absent
            }
        return self.passed(
            f"non-finite mask and kinds equal the oracle's at {judged} positions over "
            f"{len(run_trials)} injections"
            + (f" ({', '.join(absent)}: no input's dtype holds it)" if absent else ""),
            evidence,
        )

    def judge_case(self, ctx: GateContext, case: Case, run: Run) -> GateResult | None:
        return self._judge_trial(ctx, case, run, _Tally())

    def _judge_trial(
        self, ctx: GateContext, case: Case, run: Run, tally: _Tally
    ) -> GateResult | None:
        """One trial's run judged position by position: its failure, or None (``tally``
        counts the positions judged and excluded, and the extra runs asked for)."""
        expected = ctx.expected(case)
        structure = structure_findings(run.outputs, expected, ctx.output_dtypes(case))
        if structure:
            return self.failed(ctx, "output structure differs from the reference", run, structure)
        for k, (want, got) in enumerate(zip(expected, run.outputs)):
            if not isinstance(want, torch.Tensor) or not got.is_floating_point():
                continue
            judgement = ctx.on_class_judging_device(
                got.dtype, functools.partial(_judge_output, ctx, case, k, want, got)
            )
            tally.add(judgement.counts)
            if judgement.mismatched:
                return self.failed(
                    ctx,
                    f"{judgement.mismatched} output position(s) of output {k} have the wrong "
                    f"IEEE class on {case.label}",
                    run,
                    judgement.findings,
                    {
                        "mismatched_positions": judgement.mismatched,
                        "judged_positions": tally.judged,
                    },
                )
        return None

    @staticmethod
    def _injectable(ctx: GateContext) -> set[int]:
        specs = ctx.contract.inputs
        return {
            i
            for i, v in enumerate(ctx.template)
            if isinstance(v, torch.Tensor)
            and special_kinds(v.dtype)
            and not (
                i < len(specs)
                and isinstance(specs[i], TensorSpec)
                and specs[i].values is ValueDomain.FINITE
            )
        }


def _judge_output(
    ctx: GateContext,
    case: Case,
    k: int,
    want: torch.Tensor,
    got: torch.Tensor,
    device: torch.device,
) -> ClassJudgement[_Tally]:
    """Output ``k`` of one trial judged on ``device``: the oracle's result, the candidate's
    and every honest run or probe are classified there, and only counts and a few positions
    come back."""
    tally = _Tally()
    want_classes = value_classes(want.to(device).to(got.dtype))
    got_classes = value_classes(got.to(device))
    judge = functools.partial(_judged, want_classes, got_classes, k=k)
    agree, bad, asked = ctx.judge_classes(case, judge)
    tally.consulted += asked
    if bad.any() and (probe := ctx.dependence_probe(case)) is not None:
        # a NaN the oracle made by 0 x NaN where the output does not depend on the special
        # is not the kernel's to reproduce
        runs = ctx.honest_classes(case) if asked else {"native-eager": ctx.native(case)}
        agree, bad = judge({**runs, "dependence-probe": probe})
        tally.probed += 1
        if bad.any() and (refined := ctx.refined_dependence_probe(case, k, bad)):
            # a position that also sees a special it does depend on: only those specials
            # decide its class
            probe = refined
            agree, bad = judge({**runs, "dependence-probe": probe})
            tally.refined += 1
        if bad.any() and (completions := ctx.completion_probes(case, k, bad, probe)):
            # a class the dense reference made through finite entries the position does not
            # depend on (a masked key's sign) is not forced by the case
            agree, bad = judge(
                {
                    **runs,
                    "dependence-probe": probe,
                    **{f"completion{i}": c for i, c in enumerate(completions)},
                }
            )
            tally.completed += 1
    n_agree = int(agree.count_nonzero())
    tally.judged += n_agree
    tally.excluded += agree.numel() - n_agree
    if not bad.any():
        return ClassJudgement(tally)
    return ClassJudgement(
        tally,
        mismatched=int(bad.count_nonzero()),
        findings=[
            _finding(k, pos, want, got, want_classes, got_classes)
            for pos in first_positions(bad)[:MAX_POSITIONS]
        ],
    )


def _finding(
    k: int,
    pos: tuple[int, ...],
    want: torch.Tensor,
    got: torch.Tensor,
    want_classes: torch.Tensor,
    got_classes: torch.Tensor,
) -> dict[str, Any]:
    return {
        "output": k,
        "output_position": list(pos),
        "expected_class": ValueClass(int(want_classes[pos])).name,
        "actual_class": ValueClass(int(got_classes[pos])).name,
        "expected": scalar(want[pos]),
        "actual": scalar(got[pos]),
    }


def _judged(
    want_classes: torch.Tensor, got_classes: torch.Tensor, runs: dict[str, list[Any]], *, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Positions every honest run agrees with the oracle on, and the candidate's mismatches
    among them (on the device of ``want_classes``: each run is moved there)."""
    agree = torch.ones(want_classes.shape, dtype=torch.bool, device=want_classes.device)
    for honest_run in runs.values():
        agree &= value_classes(honest_run[k].to(want_classes.device)) == want_classes
    return agree, agree & (got_classes != want_classes)
