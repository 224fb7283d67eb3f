"""The error models, rewritten for speed, give the old results bit for bit.

``_old_*`` below are frozen copies of the implementations before the rewrite (boolean-mask
writes, boolean ``.sum()``, an unconditional ``where`` in the subnormal floor), with what
they call (``value_classes``, the honest agreement and error) frozen too. Every public
entry point is run old and new on inputs with NaN, +-Inf, subnormals of the output dtype,
signed zeros, overflow on rounding, honest disagreement, zero and non-finite bounds, and
the outputs must match exactly (``Assessment`` fields, tensors by their bytes).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from kernelgate.oracle import error_models
from kernelgate.oracle.compare import (
    MAX_POSITIONS,
    ValueClass,
    first_positions,
    scalar,
)
from kernelgate.oracle.error_models import (
    SAFETY,
    Assessment,
    accumulate_unit_roundoff,
    order_coefficient,
    unit_roundoff,
)

from .equivalence import same_bits, same_value

# ---------------------------------------------------------------- frozen old implementations


def _old_value_classes(tensor: torch.Tensor) -> torch.Tensor:
    classes = torch.zeros(tensor.shape, dtype=torch.int8, device=tensor.device)
    if not (tensor.is_floating_point() or tensor.is_complex()):
        return classes
    t = tensor.detach()
    classes[torch.isnan(t)] = ValueClass.NAN
    classes[t == float("inf")] = ValueClass.POS_INF
    classes[t == float("-inf")] = ValueClass.NEG_INF
    return classes


def _old_honest_agreement(
    ref: torch.Tensor, out_dtype: torch.dtype, honest: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    rounded_classes = _old_value_classes(ref.to(out_dtype) if out_dtype.is_floating_point else ref)
    judged_mask = torch.ones(ref.shape, dtype=torch.bool, device=ref.device)
    for run in honest.values():
        if isinstance(run, torch.Tensor) and tuple(run.shape) == tuple(ref.shape):
            judged_mask &= _old_value_classes(run) == rounded_classes
    return rounded_classes, judged_mask


def _old_honest_error(
    ref: torch.Tensor, honest: dict[str, torch.Tensor], judged: torch.Tensor
) -> torch.Tensor:
    worst = torch.zeros(ref.shape, dtype=torch.float64, device=ref.device)
    for run in honest.values():
        if isinstance(run, torch.Tensor) and tuple(run.shape) == tuple(ref.shape):
            error = (run.detach().to(ref.device, torch.float64) - ref).abs()
            worst = torch.maximum(worst, torch.where(judged & error.isfinite(), error, 0.0))
    return worst


def _old_subnormal_floor(
    ref: torch.Tensor, bound: torch.Tensor, dtype: torch.dtype
) -> torch.Tensor:
    if not dtype.is_floating_point:
        return bound
    tiny = float(torch.finfo(dtype).tiny)
    return torch.where(ref.abs() < tiny, bound.clamp_min(tiny), bound)


def _old_assess(
    ref: torch.Tensor,
    actual: torch.Tensor,
    expected_classes: torch.Tensor,
    judged_mask: torch.Tensor,
    model: str,
    params: dict[str, Any],
    bound: torch.Tensor,
) -> Assessment:
    got = actual.detach().to(ref.device)
    got_classes = _old_value_classes(got)
    class_bad = judged_mask & (got_classes != expected_classes)
    finite = judged_mask & ~class_bad & (expected_classes == ValueClass.FINITE)
    error = (got.to(torch.float64) - ref).abs()
    ratio = torch.zeros(ref.shape, dtype=torch.float64, device=ref.device)
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


def _old_assess_ensemble(
    expected: torch.Tensor, actual: torch.Tensor, honest: dict[str, torch.Tensor]
) -> Assessment:
    out_dtype = actual.dtype
    u = unit_roundoff(out_dtype)
    ref = expected.to(torch.float64)
    rounded_classes = _old_value_classes(ref.to(out_dtype) if out_dtype.is_floating_point else ref)
    judged_mask = torch.ones(ref.shape, dtype=torch.bool, device=ref.device)
    noise = 0.0
    for run in honest.values():
        run_classes = _old_value_classes(run)
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
    return _old_assess(
        ref,
        actual,
        rounded_classes,
        judged_mask,
        "ensemble",
        params,
        SAFETY.ensemble * (noise + SAFETY.roundoff_units * u * ref.abs()),
    )


def _old_assess_elementwise(
    expected: torch.Tensor,
    actual: torch.Tensor,
    honest: dict[str, torch.Tensor],
    *,
    scale: torch.Tensor | None = None,
    scale_name: str = "|ref|",
) -> Assessment:
    out_dtype = actual.dtype
    u = unit_roundoff(out_dtype)
    ref = expected.to(torch.float64)
    scale = ref.abs() if scale is None else scale.to(torch.float64).abs()
    classes, judged = _old_honest_agreement(ref, out_dtype, honest)
    bound = _old_subnormal_floor(ref, SAFETY.elementwise_units * u * scale, out_dtype)
    params = {
        "output_dtype": str(out_dtype).removeprefix("torch."),
        "unit_roundoff": u,
        "units": SAFETY.elementwise_units,
        "scale": scale_name,
        "bound": f"{SAFETY.elementwise_units} * u * {scale_name}",
        "honest_runs": sorted(honest),
    }
    return _old_assess(ref, actual, classes, judged, "elementwise", params, bound)


def _old_order_terms(
    ref: torch.Tensor,
    mag: torch.Tensor,
    honest: dict[str, torch.Tensor],
    judged: torch.Tensor,
    n: int,
    worst_case: bool,
    u_acc: float,
    u_out: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    mag = mag.to(ref.device, torch.float64).abs()
    if tuple(mag.shape) != tuple(ref.shape):
        mag = mag.expand_as(ref) if mag.dim() <= ref.dim() else ref.abs()
    mag = torch.where(torch.isfinite(mag), mag, ref.abs())
    c = order_coefficient(n, worst_case)
    modelled = c * u_acc * mag + SAFETY.output_rounding_units * u_out * ref.abs()
    floor = SAFETY.ensemble * _old_honest_error(ref, honest, judged)
    return mag, modelled, floor


def _old_assess_order(
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
    out_dtype = actual.dtype
    u_out = unit_roundoff(out_dtype)
    u_acc = unit_roundoff(torch.float32) if accumulate_u is None else accumulate_u
    ref = expected.to(torch.float64)
    classes, judged = _old_honest_agreement(ref, out_dtype, honest)
    mag, modelled, floor = _old_order_terms(
        ref, magnitude, honest, judged, n, worst_case, u_acc, u_out
    )
    c = order_coefficient(n, worst_case)
    bound = _old_subnormal_floor(ref, torch.maximum(modelled, floor), out_dtype)
    params = {
        "output_dtype": str(out_dtype).removeprefix("torch."),
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
        "positions_at_honest_floor": int(((floor > modelled) & judged).sum()),
    }
    return _old_assess(ref, actual, classes, judged, "order", params, bound)


def _old_admissible_error(
    model: str,
    params: dict[str, Any],
    expected: torch.Tensor,
    out_dtype: torch.dtype,
    honest: dict[str, torch.Tensor],
    *,
    magnitude: torch.Tensor | None = None,
    n: int = 1,
) -> torch.Tensor:
    ref = expected.to(torch.float64)
    u = unit_roundoff(out_dtype)
    _, judged = _old_honest_agreement(ref, out_dtype, honest)
    if model == "ensemble":
        per_element = _old_honest_error(ref, honest, judged)
        return SAFETY.ensemble * (per_element + SAFETY.roundoff_units * u * ref.abs())
    recipe = str(params.get("magnitude", "output"))
    if model == "elementwise":
        scale = ref.abs() if magnitude is None or recipe == "output" else magnitude.abs()
        return SAFETY.elementwise_units * u * scale.to(torch.float64)
    if model == "order":
        mag = ref.abs() if magnitude is None else magnitude
        worst_case = params.get("bound") == "worst-case"
        u_acc = accumulate_unit_roundoff(params)
        _, modelled, floor = _old_order_terms(ref, mag, honest, judged, n, worst_case, u_acc, u)
        return torch.maximum(modelled, floor)
    raise ValueError(model)


def _old_assess_with(
    model: str,
    params: dict[str, Any],
    expected: torch.Tensor,
    actual: torch.Tensor,
    honest: dict[str, torch.Tensor],
    *,
    magnitude: torch.Tensor | None = None,
    n: int = 1,
) -> Assessment:
    if model == "ensemble":
        return _old_assess_ensemble(expected, actual, honest)
    recipe = str(params.get("magnitude", "output"))
    if model == "elementwise":
        scale = None if magnitude is None or recipe == "output" else magnitude
        return _old_assess_elementwise(
            expected, actual, honest, scale=scale, scale_name="|ref|" if scale is None else recipe
        )
    return _old_assess_order(
        expected,
        actual,
        honest,
        magnitude=expected.abs() if magnitude is None else magnitude,
        n=n,
        worst_case=params.get("bound") == "worst-case",
        accumulate_u=accumulate_unit_roundoff(params),
        magnitude_name=recipe,
    )


# ---------------------------------------------------------------------------- test inputs

DTYPES = [torch.float32, torch.float16, torch.bfloat16]
SHAPES = [(1,), (257,), (16, 33), (3, 4, 29)]
SEEDS = [0, 1, 2]


def _reference(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """A float64 oracle with every class the judge distinguishes, in the output dtype's terms:
    NaN, +-Inf, values that overflow when rounded, subnormals, +-0, values near tiny."""
    g = torch.Generator().manual_seed(seed)
    finfo = torch.finfo(dtype)
    n = 1
    for s in shape:
        n *= s
    ref = (
        torch.randn(n, generator=g, dtype=torch.float64)
        * 10.0 ** torch.randint(-3, 4, (n,), generator=g).double()
    )
    pick = torch.randint(0, 12, (n,), generator=g)
    tiny, eps = float(finfo.tiny), float(finfo.eps)
    sub = torch.randint(1, round(1 / eps), (n,), generator=g).double() * tiny * eps
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).double()
    ref = torch.where(pick == 0, float("nan"), ref)
    ref = torch.where(pick == 1, float("inf") * sign, ref)
    ref = torch.where(pick == 2, sign * float(finfo.max) * 4, ref)  # overflows on rounding
    ref = torch.where(pick == 3, sign * sub, ref)  # subnormal in the output dtype
    ref = torch.where(pick == 4, sign * 0.0, ref)  # signed zeros
    ref = torch.where(pick == 5, sign * tiny * (1 + (torch.rand(n, generator=g) - 0.5) * 1e-2), ref)
    ref = torch.where(pick == 6, sign * tiny * eps * 0.25, ref)  # rounds to a zero
    if n == 1:
        ref = torch.tensor([0.75], dtype=torch.float64) if seed % 2 else ref
    return ref.reshape(shape)


def _candidate(ref: torch.Tensor, dtype: torch.dtype, seed: int, defect: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 1000)
    u = unit_roundoff(dtype)
    noise = 1 + 3 * u * (torch.rand(ref.shape, generator=g, dtype=torch.float64) - 0.5)
    got = (ref * noise).to(dtype)
    if defect == "honest":
        return got
    flat = got.reshape(-1).clone()
    n = flat.numel()
    pos = torch.randperm(n, generator=g)[: max(1, n // 10)]
    if defect == "wrong":
        flat[pos] = (flat[pos].double() * 1.5 + 1e-3).to(dtype)
    elif defect == "classes":
        specials = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.0], dtype=dtype)
        flat[pos] = specials[torch.arange(pos.numel()) % 4]
    elif defect == "flush":
        tiny = float(torch.finfo(dtype).tiny)
        flat = torch.where(flat.abs() < tiny, torch.zeros_like(flat), flat)
    return flat.reshape(ref.shape)


def _honest(ref: torch.Tensor, dtype: torch.dtype, seed: int, runs: int) -> dict[str, Any]:
    honest: dict[str, Any] = {}
    for r in range(runs):
        run = _candidate(ref, dtype, seed + 17 * (r + 1), "honest")
        if r == 1:  # an honest run that disagrees on a few classes (an honest overflow)
            flat = run.reshape(-1).clone()
            flat[:: max(1, flat.numel() // 5)] = float("inf")
            run = flat.reshape(ref.shape)
        honest[f"run{r}"] = run
    if runs == 3:
        honest["scalar"] = 1.0  # not a tensor: the models skip it
        honest["other-shape"] = torch.zeros(2, 2, 2, 2, 2)
    return honest


def _cases() -> list[tuple[Any, ...]]:
    cases = []
    for dtype in DTYPES:
        for shape in SHAPES:
            for seed in SEEDS:
                for defect in ("honest", "wrong", "classes", "flush"):
                    runs = (seed + len(shape)) % 4  # 0 .. 3 honest runs
                    cases.append((dtype, shape, seed, defect, runs))
    return cases


CASES = _cases()


def _assert_same(old: Assessment, new: Assessment) -> None:
    for name in ("model", "params", "worst_ratio", "judged", "excluded", "mismatches"):
        assert same_value(getattr(old, name), getattr(new, name)), name
    assert old.passed == new.passed


# ----------------------------------------------------------------------------------- tests


@pytest.mark.parametrize(("dtype", "shape", "seed", "defect", "runs"), CASES)
def test_assessments_equal_old(
    dtype: torch.dtype, shape: tuple[int, ...], seed: int, defect: str, runs: int
) -> None:
    ref = _reference(shape, dtype, seed)
    got = _candidate(ref, dtype, seed, defect)
    honest = _honest(ref, dtype, seed, runs)
    tensors = {
        k: v for k, v in honest.items() if isinstance(v, torch.Tensor) and k != "other-shape"
    }
    g = torch.Generator().manual_seed(seed + 99)
    magnitude = ref.abs() * (1 + torch.rand(ref.shape, generator=g, dtype=torch.float64))
    magnitude.reshape(-1)[:: max(1, magnitude.numel() // 7)] = float("inf")
    # the ensemble model reads every run, as the old one did (tensors of the output shape)
    _assert_same(
        _old_assess_ensemble(ref, got, tensors), error_models.assess_ensemble(ref, got, tensors)
    )
    _assert_same(
        _old_assess_elementwise(ref, got, honest), error_models.assess_elementwise(ref, got, honest)
    )
    _assert_same(
        _old_assess_elementwise(ref, got, honest, scale=-magnitude, scale_name="|x|"),
        error_models.assess_elementwise(ref, got, honest, scale=-magnitude, scale_name="|x|"),
    )
    for worst_case in (False, True):
        kwargs = {"magnitude": magnitude, "n": 1 + 37 * seed, "worst_case": worst_case}
        _assert_same(
            _old_assess_order(ref, got, honest, **kwargs),
            error_models.assess_order(ref, got, honest, **kwargs),
        )
    row = magnitude.reshape(-1)[-shape[-1] :]  # a broadcast magnitude
    _assert_same(
        _old_assess_order(ref, got, honest, magnitude=row, n=5, accumulate_u=2.0**-11),
        error_models.assess_order(ref, got, honest, magnitude=row, n=5, accumulate_u=2.0**-11),
    )
    for model, params in [
        ("ensemble", {}),
        ("elementwise", {}),
        ("elementwise", {"magnitude": "abs-input"}),
        ("order", {"magnitude": "sum-abs"}),
        ("order", {"bound": "worst-case", "tf32": True}),
        ("order", {"accumulate_dtype": "float16"}),
    ]:
        for mag in (None, magnitude):
            hon = tensors if model == "ensemble" else honest
            kw = {"magnitude": mag, "n": 64}
            _assert_same(
                _old_assess_with(model, params, ref, got, hon, **kw),
                error_models.assess_with(model, params, ref, got, hon, **kw),
            )
            assert same_bits(
                _old_admissible_error(model, params, ref, dtype, hon, **kw),
                error_models.admissible_error(model, params, ref, dtype, hon, **kw),
            )


@pytest.mark.parametrize("dtype", [*DTYPES, torch.float64])
@pytest.mark.parametrize("seed", SEEDS)
def test_assess_equals_old_on_arbitrary_bounds(dtype: torch.dtype, seed: int) -> None:
    """Zero, negative, NaN, infinite and subnormal bounds; errors of zero; masks of any kind."""
    shape = (33, 31)
    ref = _reference(shape, dtype, seed)
    g = torch.Generator().manual_seed(seed + 5)
    got = _candidate(ref, dtype, seed, "classes")
    got.reshape(-1)[::3] = ref.reshape(-1)[::3].to(dtype)  # exact: error 0 at bound 0 too
    bound = torch.rand(shape, generator=g, dtype=torch.float64) * 1e-2
    pick = torch.randint(0, 7, shape, generator=g)
    bound = torch.where(pick == 0, 0.0, bound)
    bound = torch.where(pick == 1, -bound, bound)
    bound = torch.where(pick == 2, float("nan"), bound)
    bound = torch.where(pick == 3, float("inf"), bound)
    bound = torch.where(pick == 4, 1e-310, bound)
    expected_classes = _old_value_classes(ref.to(dtype))
    masks = [
        torch.ones(shape, dtype=torch.bool),
        torch.zeros(shape, dtype=torch.bool),
        torch.rand(shape, generator=g) < 0.6,
    ]
    for judged in masks:
        for bnd in (bound, bound.abs(), torch.zeros(shape, dtype=torch.float64)):
            old = _old_assess(ref, got, expected_classes, judged, "m", {"k": 1}, bnd)
            new = error_models._assess(ref, got, expected_classes, judged, "m", {"k": 1}, bnd)
            _assert_same(old, new)
    empty = ref.reshape(-1)[:0]
    judged = torch.ones(0, dtype=torch.bool)
    old = _old_assess(empty, empty.to(dtype), judged.to(torch.int8), judged, "m", {}, empty)
    new = error_models._assess(
        empty, empty.to(dtype), judged.to(torch.int8), judged, "m", {}, empty
    )
    _assert_same(old, new)


@pytest.mark.parametrize("dtype", [*DTYPES, torch.float64, torch.int32])
def test_subnormal_floor_equals_old(dtype: torch.dtype) -> None:
    ref = _reference((64, 9), torch.float32 if dtype == torch.int32 else dtype, 4)
    bound = ref.abs() * 1e-3
    normal = torch.where(torch.isfinite(ref) & (ref.abs() > 1.0), ref, 2.0)  # none below tiny
    for r in (ref, normal, ref.reshape(-1)[:0]):
        b = r.abs() * 1e-3
        old = _old_subnormal_floor(r, b, dtype)
        assert same_bits(old, error_models._subnormal_floor(r, b, dtype))
        assert same_bits(old, error_models._subnormal_floor(r, b, dtype, magnitude=r.abs()))
    # a bound of another (broadcastable) shape still comes back in the old shape
    row = bound[0]
    assert same_bits(
        _old_subnormal_floor(normal, row, dtype), error_models._subnormal_floor(normal, row, dtype)
    )
