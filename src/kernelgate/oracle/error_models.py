"""Error models: tolerances derived from first principles, never tuned per kernel.

Every thresholded judgement goes through a model here and records which model produced its
bound, with the model's inputs, so a verdict can say what its tolerance rests on.

The safety factors are the only free constants. They live in ``SAFETY`` and are set once,
by calibration on the red team and the positive controls (never per kernel).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from kernelgate.oracle.compare import (
    MAX_POSITIONS,
    ValueClass,
    first_positions,
    scalar,
    value_classes,
)


@dataclass(frozen=True)
class SafetyFactors:
    """Multipliers on measured or modelled honest error. Calibrated, then fixed."""

    ensemble: float = 16.0  # x the worst honest evaluation's error
    roundoff_units: float = 2.0  # units of roundoff of the output dtype, relative to |ref|
    elementwise_units: float = 4.0  # elementwise model: units of roundoff relative to |ref|
    order_probabilistic: float = 4.0  # order model: c in c * u * sqrt(N) (default bound)
    order_worst_case: float = 1.0  # order model: c in c * u * N (bound = "worst-case")
    order: float = 1.0  # multiplier on the order model's reduction term


SAFETY = SafetyFactors()

# Unit roundoff of the products when an op's PyTorch default computes them in TF32
# (10 explicit fraction bits): cuDNN convolution on CUDA.
TF32_UNIT_ROUNDOFF = 2.0**-11


def unit_roundoff(dtype: torch.dtype) -> float:
    """u = 2**-p for a dtype with a p-bit significand (half an ulp at 1.0)."""
    if not dtype.is_floating_point:
        return 0.0
    return float(torch.finfo(dtype).eps) / 2


@dataclass
class Assessment:
    """How one candidate output compares with the oracle under an error model."""

    model: str
    params: dict[str, Any]
    worst_ratio: float  # max |error| / bound over judged positions (inf on class mismatch)
    judged: int
    excluded: int  # positions where honest evaluations disagree with the oracle's class
    mismatches: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.worst_ratio <= 1.0


def assess_ensemble(
    expected: torch.Tensor,
    actual: torch.Tensor,
    honest: dict[str, torch.Tensor],
) -> Assessment:
    """Ensemble bound: ``S * (worst honest |error| + k*u*|ref|)`` element by element.

    ``expected`` is the float64 oracle, ``actual`` the candidate in its output dtype, and
    ``honest`` independent honest evaluations of the reference (each in its own dtype).
    The absolute term is the largest error any honest evaluation made on these inputs; the
    relative term is what rounding the exact result to the output dtype costs.
    """
    out_dtype = actual.dtype
    u = unit_roundoff(out_dtype)
    ref = expected.to(torch.float64)
    rounded_classes = value_classes(ref.to(out_dtype) if out_dtype.is_floating_point else ref)
    judged_mask = torch.ones(ref.shape, dtype=torch.bool)
    noise = 0.0
    for run in honest.values():
        run_classes = value_classes(run)
        judged_mask &= run_classes == rounded_classes
        finite = (run_classes == ValueClass.FINITE) & (rounded_classes == ValueClass.FINITE)
        if finite.any():
            noise = max(noise, float((run.to(torch.float64) - ref)[finite].abs().max()))
    params = {
        "output_dtype": str(out_dtype).removeprefix("torch."),
        "unit_roundoff": u,
        "honest_runs": sorted(honest),
        "worst_honest_abs_error": noise,
        "safety": SAFETY.ensemble,
        "roundoff_units": SAFETY.roundoff_units,
        "bound": f"{SAFETY.ensemble} * ({noise:.3e} + {SAFETY.roundoff_units} * u * |ref|)",
    }
    return _assess(
        ref,
        actual,
        rounded_classes,
        judged_mask,
        "ensemble",
        params,
        SAFETY.ensemble * (noise + SAFETY.roundoff_units * u * ref.abs()),
    )


def _assess(
    ref: torch.Tensor,
    actual: torch.Tensor,
    expected_classes: torch.Tensor,
    judged_mask: torch.Tensor,
    model: str,
    params: dict[str, Any],
    bound: torch.Tensor,
) -> Assessment:
    got = actual.detach().cpu()
    got_classes = value_classes(got)
    class_bad = judged_mask & (got_classes != expected_classes)
    finite = judged_mask & ~class_bad & (expected_classes == ValueClass.FINITE)
    error = (got.to(torch.float64) - ref).abs()
    ratio = torch.zeros(ref.shape, dtype=torch.float64)
    positive = bound > 0
    ratio[finite & positive] = (error / bound.clamp_min(1e-300))[finite & positive]
    ratio[finite & ~positive & (error > 0)] = float("inf")
    ratio[class_bad] = float("inf")
    worst = float(ratio.max()) if ratio.numel() else 0.0
    failing = ratio > 1.0
    mismatches = [
        {
            "output_position": list(pos),
            "expected": scalar(ref[pos]),
            "actual": scalar(got[pos]),
            "abs_error": scalar(error[pos]),
            "bound": scalar(bound[pos]),
        }
        for pos in first_positions(failing)[:MAX_POSITIONS]
    ]
    return Assessment(
        model=model,
        params=params,
        worst_ratio=worst,
        judged=int(judged_mask.sum()),
        excluded=int((~judged_mask).sum()),
        mismatches=mismatches,
    )
