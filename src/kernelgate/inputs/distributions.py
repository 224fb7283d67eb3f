"""Value distributions for floating-point inputs, each a seeded draw in float64.

CMP-01 runs the candidate on all of them at the reference shape: a kernel that is right on
``randn`` but wrong on large magnitudes, heavy tails, one-signed data, exact integers or
cancellation shows it here. Magnitudes scale with the dtype so nothing overflows on input.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from kernelgate.inputs.host import to_host

Draw = Callable[[torch.Generator, tuple[int, ...], torch.dtype], torch.Tensor]


def _large_scale(dtype: torch.dtype) -> float:
    return min(1e4, float(torch.finfo(dtype).max) ** 0.25)


def _tiny_scale(dtype: torch.dtype) -> float:
    return max(1e-4, float(torch.finfo(dtype).tiny) ** 0.25)


def _normal(g: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(shape, generator=g, dtype=torch.float64)


def _uniform(g: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.rand(shape, generator=g, dtype=torch.float64) * 2 - 1


def _large(g: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return _normal(g, shape, dtype) * _large_scale(dtype)


def _tiny(g: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return _normal(g, shape, dtype) * _tiny_scale(dtype)


def _heavy_tailed(g: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Student-t with 2 degrees of freedom (infinite variance), clipped to the large scale."""
    z = _normal(g, shape, dtype)
    chi2 = torch.randn((2, *shape), generator=g, dtype=torch.float64).pow(2).sum(0)
    limit = _large_scale(dtype)
    return (z / (chi2 / 2).sqrt().clamp_min(1e-12)).clamp(-limit, limit)


def _one_signed(g: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return _normal(g, shape, dtype).abs() + 0.01


def _integer_valued(g: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    return torch.randint(-8, 9, shape, generator=g).to(torch.float64)


def _cancellation(g: torch.Generator, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """Large values that cancel in pairs along the last dim, plus small residue."""
    if not shape or shape[-1] < 2:
        return _normal(g, shape, dtype)
    big = _normal(g, shape, dtype) * _large_scale(dtype) ** 0.5
    half = shape[-1] // 2
    big[..., half : 2 * half] = -big[..., :half]
    residue = _normal(g, shape, dtype)
    order = torch.argsort(torch.rand(shape, generator=g), dim=-1)
    return torch.gather(big, -1, order) + residue


DISTRIBUTIONS: dict[str, Draw] = {
    "normal": _normal,
    "uniform": _uniform,
    "large": _large,
    "tiny": _tiny,
    "heavy-tailed": _heavy_tailed,
    "one-signed": _one_signed,
    "integer-valued": _integer_valued,
    "cancellation": _cancellation,
}


def draw(
    name: str,
    seed: int,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Values of ``dtype`` (rounded from float64) from distribution ``name``, on the CPU.

    ``device`` is where the random numbers are drawn: the same seed gives other values on
    another device type, so a replay names its device. Device mode draws on the GPU, since
    float64 draws on the CPU (about 10 ns an element, single-threaded) took most of a minute
    per verification at KernelBench's 67M-element inputs.
    """
    generator = torch.Generator(device).manual_seed(seed)
    with torch.device(device):
        values = DISTRIBUTIONS[name](generator, tuple(shape), dtype)
    return to_host(round_to(values, dtype))


def round_to(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Finite float64 ``values`` rounded to ``dtype``, inside its finite range.

    A draw is scaled to stay inside the range, but its tail may still pass a narrow dtype's
    largest value (float8_e4m3fn's is 448), and what a conversion makes of such a value is
    not finite or not portable: float8_e4m3fn has no Inf, and the CPU saturates where the
    GPU gives NaN. Values are clamped to the finite range first, so every drawn value is
    finite in ``dtype``. A dtype without negative values (float8_e8m0fnu, a power-of-two
    scale) gets magnitudes, as its conversion would make them, so that no draw collapses
    onto its smallest value. Non-floating dtypes are converted as they are.
    """
    if not dtype.is_floating_point or dtype == torch.float64:
        return values.to(dtype)
    info = torch.finfo(dtype)
    if info.min >= 0:
        values = values.abs()
    return values.clamp(float(info.min), float(info.max)).to(dtype)


def fold_into_range(values: torch.Tensor, lo: float | None, hi: float | None) -> torch.Tensor:
    """Map finite values into ``[lo, hi]`` by reflection, keeping their spread and zeros.

    Reflection (rather than clamping) keeps every distribution's character inside the range:
    heavy tails stay heavy, integers stay integers, and no mass piles up on a bound.
    """
    original = x = values.to(torch.float64)
    if lo is not None and hi is not None:
        width = hi - lo
        phase = torch.remainder(x - lo, 2 * width)
        x = lo + torch.where(phase > width, 2 * width - phase, phase)
    elif lo is not None:
        x = lo + (x - lo).abs()
    elif hi is not None:
        x = hi - (hi - x).abs()
    # Injected NaN and Inf (EXC-01) are the point of their case: folding would turn Inf
    # into NaN, so non-finite values pass through unchanged.
    return torch.where(torch.isfinite(original), x, original).to(values.dtype)


STRUCTURES = ("upper-triangular", "lower-triangular")


def structure_of(samples: list[torch.Tensor]) -> str | None:
    """The zero pattern all ``samples`` of one input share, if it is one of ``STRUCTURES``.

    Exact zeros on one side of the diagonal of every sample (and nonzeros elsewhere) do not
    happen by chance in floating draws: they are how the reference builds its inputs.
    """
    if not samples or any(s.dim() < 2 or not s.is_floating_point() for s in samples):
        return None
    if any(min(s.shape[-2:]) < 4 or not bool(s.any()) for s in samples):
        return None
    upper = all(torch.equal(s, triangle(s, upper=True)) for s in samples)
    lower = all(torch.equal(s, triangle(s, upper=False)) for s in samples)
    if upper != lower:  # both: diagonal (or zero), left as it is
        return "upper-triangular" if upper else "lower-triangular"
    return None


def triangle(values: torch.Tensor, *, upper: bool) -> torch.Tensor:
    """``values.triu()`` (``upper``) or ``values.tril()``, for every dtype the judge takes.

    torch has no ``triu`` for the float8 dtypes; their +0.0 is the zero byte (as in every
    floating dtype), so the triangle of the bytes is the triangle of the values.
    """
    if values.is_floating_point() and values.element_size() == 1:
        raw = values.view(torch.uint8)
        return (raw.triu() if upper else raw.tril()).view(values.dtype)
    return values.triu() if upper else values.tril()


def impose_structure(values: torch.Tensor, structure: str | None) -> torch.Tensor:
    """``values`` with the zeros of ``structure`` (see ``structure_of``) written in."""
    if structure is None or values.dim() < 2:
        return values
    if structure == "upper-triangular":
        return triangle(values, upper=True)
    if structure == "lower-triangular":
        return triangle(values, upper=False)
    raise ValueError(f"unknown input structure {structure!r}; known: {', '.join(STRUCTURES)}")
