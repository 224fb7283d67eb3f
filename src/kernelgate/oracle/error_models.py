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
    """Multipliers on measured or modelled honest error. Calibrated once, then fixed.

    Calibration (2026-12-01, ``kernelgate calibrate`` on the CPU and on the H200; margins in
    docs/redteam.md). The rule: every positive control's largest error stays within about a
    quarter of its bound (room for other devices' noise), and every red-team defect caught by
    a thresholded gate stays at least 10x past it. With the first-principles constants (4 u
    elementwise, c = 4 sqrt(N), 4 u output rounding) honest controls reached 0.46
    (elementwise) and 0.49 (order) of the bound, so both models are now 2x looser: honest
    0.23 / 0.25 on the CPU, 0.22 / 0.29 on the H200 (the 0.29 is ORD-01 on the matmul
    control, judged by the honest floor, 16x cuBLAS's own error on cancellation rows); the
    subtlest defects then sat at 7.2e3 and 17x (a defect added later, inputs cut to 13
    fraction bits, sits at 2.9x of the order bound on the CPU, 11.8x past the largest honest
    error). The ensemble model's honest maximum was 0.0625, within the rule already, so its
    factor (which also scales the honest floor) is unchanged.
    """

    ensemble: float = 16.0  # x the worst honest evaluation's error
    roundoff_units: float = 2.0  # units of roundoff of the output dtype, relative to |ref|
    elementwise_units: float = 8.0  # elementwise model: units of roundoff relative to |ref|
    order_probabilistic: float = 4.0  # order model: c in c * u * sqrt(N) (default bound)
    order_worst_case: float = 1.0  # order model: c in c * u * N (bound = "worst-case")
    order: float = 2.0  # multiplier on the order model's reduction term (calibrated)
    # order model: units of roundoff of the output dtype for the final conversion, relative
    # to |ref|: 4 would admit a truncating conversion (2u, the Triton interpreter's
    # fp32->bf16) after double rounding through fp32; calibrated to 8 with the rest.
    output_rounding_units: float = 8.0


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
    class_mismatches: int = 0  # judged positions of another IEEE class than the oracle's
    note: str = ""  # what failed, where a ratio says nothing (exact and index outputs)

    @property
    def passed(self) -> bool:
        return self.worst_ratio <= 1.0

    @property
    def worst_text(self) -> str:
        """``worst error/bound R`` for a reason, saying what an infinite R stands for: a
        NaN where the oracle is finite reads as "inf" otherwise, which explains nothing."""
        text = f"worst error/bound {self.worst_ratio:.3g}"
        if self.class_mismatches:
            text += (
                f"; {self.class_mismatches} position(s) of another IEEE class than the "
                "oracle's (NaN or Inf where it is finite, or the reverse)"
            )
        if self.note:
            text += f"; {self.note}"
        return text


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
    judged_mask = torch.ones(ref.shape, dtype=torch.bool, device=ref.device)
    noise = 0.0
    for run in honest.values():
        run_classes = value_classes(run)
        judged_mask &= run_classes == rounded_classes
        finite = (run_classes == ValueClass.FINITE) & (rounded_classes == ValueClass.FINITE)
        if finite.any():
            noise = max(noise, float((run.to(ref.device, torch.float64) - ref)[finite].abs().max()))
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


def _honest_agreement(
    ref: torch.Tensor, out_dtype: torch.dtype, honest: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Expected IEEE classes (the oracle rounded to the output dtype) and the judged mask.

    Positions where an honest evaluation of the reference lands in another class (an honest
    overflow, say) are not judged by a thresholded model; EXC-01 owns non-finite behaviour.
    """
    rounded_classes = value_classes(ref.to(out_dtype) if out_dtype.is_floating_point else ref)
    judged_mask = torch.ones(ref.shape, dtype=torch.bool, device=ref.device)
    for run in honest.values():
        if isinstance(run, torch.Tensor) and tuple(run.shape) == tuple(ref.shape):
            judged_mask &= value_classes(run) == rounded_classes
    return rounded_classes, judged_mask


def _honest_error(
    ref: torch.Tensor, honest: dict[str, torch.Tensor], judged: torch.Tensor
) -> torch.Tensor:
    """Per element, the largest |error| of any honest evaluation (0 where none is finite)."""
    worst = torch.zeros(ref.shape, dtype=torch.float64, device=ref.device)
    for run in honest.values():
        if isinstance(run, torch.Tensor) and tuple(run.shape) == tuple(ref.shape):
            error = (run.detach().to(ref.device, torch.float64) - ref).abs()
            worst = torch.maximum(worst, torch.where(judged & error.isfinite(), error, 0.0))
    return worst


def _subnormal_floor(
    ref: torch.Tensor,
    bound: torch.Tensor,
    dtype: torch.dtype,
    *,
    magnitude: torch.Tensor | None = None,
) -> torch.Tensor:
    """Below the smallest normal of the output dtype the bound is that normal: whether
    subnormal results are kept or flushed is EXC-02's question, not a rounding question.

    ``magnitude`` is ``ref.abs()`` where the caller has it already. When no element is
    below the smallest normal (one reduction says so) ``bound`` comes back as it is: the
    ``where`` would copy it unchanged. Only when it has ``ref``'s shape, though: the
    ``where`` broadcasts a smaller bound to that shape.
    """
    if not dtype.is_floating_point:
        return bound
    tiny = float(torch.finfo(dtype).tiny)
    small = (ref.abs() if magnitude is None else magnitude) < tiny
    if bound.shape == small.shape and not bool(small.any()):
        return bound
    return torch.where(small, bound.clamp_min(tiny), bound)


def _dtype_str(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def assess_elementwise(
    expected: torch.Tensor,
    actual: torch.Tensor,
    honest: dict[str, torch.Tensor],
    *,
    scale: torch.Tensor | None = None,
    scale_name: str = "|ref|",
) -> Assessment:
    """Elementwise bound: ``units * u * scale`` per element, ``scale`` = |ref| by default.

    For ops computed with one or a few roundings per element (add, mul, relu, exp, ...)
    the honest error is a few units of roundoff of the output dtype relative to the exact
    result. Library entries whose honest implementations lose absolute accuracy (gelu via
    1+erf, tanh via exponentials) pass a larger ``scale`` (|ref| + |x|).
    """
    out_dtype = actual.dtype
    u = unit_roundoff(out_dtype)
    ref = expected.to(torch.float64)
    ref_abs = ref.abs()
    scale = ref_abs if scale is None else scale.to(torch.float64).abs()
    classes, judged = _honest_agreement(ref, out_dtype, honest)
    bound = _subnormal_floor(
        ref, SAFETY.elementwise_units * u * scale, out_dtype, magnitude=ref_abs
    )
    params = {
        "output_dtype": _dtype_str(out_dtype),
        "unit_roundoff": u,
        "units": SAFETY.elementwise_units,
        "scale": scale_name,
        "bound": f"{SAFETY.elementwise_units} * u * {scale_name}",
        "honest_runs": sorted(honest),
    }
    return _assess(ref, actual, classes, judged, "elementwise", params, bound)


def order_coefficient(n: int, worst_case: bool = False) -> float:
    """c(N) of the order bound: ``4 sqrt(N)`` (probabilistic) or ``N`` (worst case), x safety.

    The probabilistic form is the rounding-error bound that holds with high probability when
    roundings are independent (Higham & Mary); the worst case is the classical gamma_N.
    """
    n = max(int(n), 1)
    base = SAFETY.order_worst_case * n if worst_case else SAFETY.order_probabilistic * n**0.5
    return SAFETY.order * base


def assess_order(
    expected: torch.Tensor,
    actual: torch.Tensor,
    honest: dict[str, torch.Tensor],
    *,
    magnitude: torch.Tensor,
    n: int,
    worst_case: bool = False,
    accumulate_u: float | None = None,
    magnitude_name: str = "sum |terms|",
) -> Assessment:
    """Order bound for reductions and dot products of length ``n``.

    ``bound = c(N) * u_acc * M + output_rounding_units * u_out * |ref|``: ``M`` is the magnitude of
    the computation (the sum of |terms| per output, from evaluating the linear part on
    absolute values in fp64), ``u_acc`` the unit roundoff the reduction is promised in
    (fp32 unless the contract says TF32), the second term the final rounding to the output
    dtype. Cancellation cannot hide a lost term: M does not cancel. The bound is never below
    ``ensemble`` x the largest error an honest evaluation of the reference made at that
    element (the model is a promise about honest arithmetic, not a demand for more).
    """
    out_dtype = actual.dtype
    u_out = unit_roundoff(out_dtype)
    u_acc = unit_roundoff(torch.float32) if accumulate_u is None else accumulate_u
    ref = expected.to(torch.float64)
    ref_abs = ref.abs()
    classes, judged = _honest_agreement(ref, out_dtype, honest)
    mag, modelled, floor = _order_terms(
        ref, magnitude, honest, judged, n, worst_case, u_acc, u_out, ref_abs=ref_abs
    )
    c = order_coefficient(n, worst_case)
    bound = _subnormal_floor(ref, torch.maximum(modelled, floor), out_dtype, magnitude=ref_abs)
    params = {
        "output_dtype": _dtype_str(out_dtype),
        "n": int(n),
        "bound_kind": "worst-case" if worst_case else "probabilistic",
        "coefficient": c,
        "accumulate_unit_roundoff": u_acc,
        "output_unit_roundoff": u_out,
        "magnitude": magnitude_name,
        "max_magnitude": float(mag[torch.isfinite(mag)].max()) if mag.numel() else 0.0,
        "bound": (
            f"{c:.4g} * {u_acc:.3e} * M + {SAFETY.output_rounding_units} * {u_out:.3e} * |ref| "
            f"(c = {'N' if worst_case else f'{SAFETY.order_probabilistic} sqrt(N)'}"
            f" x {SAFETY.order}, N = {n})"
        ),
        "honest_runs": sorted(honest),
        "honest_floor": f"{SAFETY.ensemble} * worst honest |error| per element",
        "positions_at_honest_floor": int(((floor > modelled) & judged).count_nonzero()),
    }
    return _assess(ref, actual, classes, judged, "order", params, bound)


def _order_terms(
    ref: torch.Tensor,
    mag: torch.Tensor,
    honest: dict[str, torch.Tensor],
    judged: torch.Tensor,
    n: int,
    worst_case: bool,
    u_acc: float,
    u_out: float,
    *,
    ref_abs: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The order model's magnitude, modelled bound and honest floor, per element.

    ``ref_abs`` is ``ref.abs()`` where the caller has it already (computed once here if not).
    """
    ref_abs = ref.abs() if ref_abs is None else ref_abs
    mag = mag.to(ref.device, torch.float64).abs()
    if tuple(mag.shape) != tuple(ref.shape):
        mag = mag.expand_as(ref) if mag.dim() <= ref.dim() else ref_abs
    # An infinite magnitude (an honest overflow of |terms|) bounds nothing: fall back to |ref|.
    mag = torch.where(torch.isfinite(mag), mag, ref_abs)
    c = order_coefficient(n, worst_case)
    modelled = c * u_acc * mag + SAFETY.output_rounding_units * u_out * ref_abs
    # The contract cannot demand more than the reference's own honest evaluations achieve:
    # on adversarial rows (ORD-01) a blocked fp32 GEMM's roundings are correlated and
    # exceed the probabilistic model, and cuBLAS running the reference does the same.
    floor = SAFETY.ensemble * _honest_error(ref, honest, judged)
    return mag, modelled, floor


def accumulate_unit_roundoff(params: dict[str, Any]) -> float:
    """The unit roundoff an ``order`` contract promises its reductions in (TF32 or a dtype)."""
    if params.get("tf32"):
        return TF32_UNIT_ROUNDOFF
    return unit_roundoff(getattr(torch, str(params.get("accumulate_dtype", "float32"))))


def _elementwise_scale(
    params: dict[str, Any], magnitude: torch.Tensor | None
) -> torch.Tensor | None:
    """The scale an ``elementwise`` contract measures errors against: the library entry's
    magnitude where its recipe names one, else None (the output's own |ref|)."""
    if magnitude is None or str(params.get("magnitude", "output")) == "output":
        return None
    return magnitude


def uses_magnitude(model: str, params: dict[str, Any]) -> bool:
    """Whether ``model`` with ``params`` reads the library entry's magnitude run.

    The magnitude is a second float64 evaluation of the reference (with the entry's
    reduction replaced by its magnitude recipe) and costs as much as the oracle itself
    (10-14 s per case at KernelBench sizes on the H200), so it is made only for the models
    that use it: ``order`` (its ``M``) and ``elementwise`` with a recipe other than
    ``output`` (gelu's and tanh's ``|ref| + |x|``). ``ensemble`` and ``elementwise`` on the
    output's own ``|ref|`` never read it. An unknown model is assumed to use it.
    """
    if model == "ensemble":
        return False
    if model == "elementwise":
        return str(params.get("magnitude", "output")) != "output"
    return True


def admissible_error(
    model: str,
    params: dict[str, Any],
    expected: torch.Tensor,
    out_dtype: torch.dtype,
    honest: dict[str, torch.Tensor],
    *,
    magnitude: torch.Tensor | None = None,
    n: int = 1,
) -> torch.Tensor:
    """Per element, how far from the exact result an honest output may lie under the
    contract's error model: its bound without the subnormal floor (float64).

    EXC-02 judges a value's class and sign exactly only where this interval around the
    exact result stays inside one class and sign: the sign of a conv output that cancels to
    1e-5, or whether a LayerNorm output lands one ulp above or below the smallest normal,
    is a rounding question the reference does not decide. For ``ensemble`` contracts the
    worst honest error is taken per element here (the whole-output maximum would leave
    every small output undetermined).
    """
    ref = expected.to(torch.float64)
    u = unit_roundoff(out_dtype)
    _, judged = _honest_agreement(ref, out_dtype, honest)
    if model == "ensemble":
        per_element = _honest_error(ref, honest, judged)
        return SAFETY.ensemble * (per_element + SAFETY.roundoff_units * u * ref.abs())
    if model == "elementwise":
        scale = _elementwise_scale(params, magnitude)
        scale = ref.abs() if scale is None else scale.abs()
        return SAFETY.elementwise_units * u * scale.to(torch.float64)
    if model == "order":
        mag = ref.abs() if magnitude is None else magnitude
        worst_case = params.get("bound") == "worst-case"
        u_acc = accumulate_unit_roundoff(params)
        _, modelled, floor = _order_terms(ref, mag, honest, judged, n, worst_case, u_acc, u)
        return torch.maximum(modelled, floor)
    raise ValueError(f"unknown error model {model!r} (known: ensemble, elementwise, order)")


def assess_with(
    model: str,
    params: dict[str, Any],
    expected: torch.Tensor,
    actual: torch.Tensor,
    honest: dict[str, torch.Tensor],
    *,
    magnitude: torch.Tensor | None = None,
    n: int = 1,
) -> Assessment:
    """Dispatch on the contract's error model name (``ErrorModelSpec.name``/``params``)."""
    if model == "ensemble":
        return assess_ensemble(expected, actual, honest)
    recipe = str(params.get("magnitude", "output"))
    if model == "elementwise":
        scale = _elementwise_scale(params, magnitude)
        return assess_elementwise(
            expected, actual, honest, scale=scale, scale_name="|ref|" if scale is None else recipe
        )
    if model == "order":
        return assess_order(
            expected,
            actual,
            honest,
            magnitude=expected.abs() if magnitude is None else magnitude,
            n=n,
            worst_case=params.get("bound") == "worst-case",
            accumulate_u=accumulate_unit_roundoff(params),
            magnitude_name=recipe,
        )
    raise ValueError(f"unknown error model {model!r} (known: ensemble, elementwise, order)")


def _assess(
    ref: torch.Tensor,
    actual: torch.Tensor,
    expected_classes: torch.Tensor,
    judged_mask: torch.Tensor,
    model: str,
    params: dict[str, Any],
    bound: torch.Tensor,
) -> Assessment:
    got = actual.detach().to(ref.device)
    got_classes = value_classes(got)
    same_class = got_classes == expected_classes
    class_bad = judged_mask & ~same_class
    finite = judged_mask & same_class & (expected_classes == ValueClass.FINITE)
    error = got.to(torch.float64) - ref
    error.abs_()  # the difference is a fresh tensor
    # ratio = error / bound where judged finite with a positive bound, 0 elsewhere, inf on
    # a class mismatch or an error against a bound <= 0 (or NaN); masked fills over the
    # whole quotient, since boolean-mask writes cost a nonzero-and-scatter each (and a host
    # sync on CUDA).
    scored = finite & (bound > 0)
    ratio = error / bound.clamp_min(1e-300)
    ratio.masked_fill_(~scored, 0.0)
    ratio.masked_fill_((finite & ~scored & (error > 0)) | class_bad, float("inf"))
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
    judged = int(judged_mask.count_nonzero())
    return Assessment(
        model=model,
        params=params,
        worst_ratio=worst,
        judged=judged,
        excluded=judged_mask.numel() - judged,
        mismatches=mismatches,
        class_mismatches=int(class_bad.count_nonzero()),
    )
