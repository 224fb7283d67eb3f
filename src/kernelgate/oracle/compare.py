"""Exact comparisons: value classes and bitwise equality, position by position.

Everything here runs in the judge on tensors rebuilt from raw bytes, so a candidate that
monkeypatches ``torch.equal`` or ``Tensor.__eq__`` in its own process changes nothing.
"""

from __future__ import annotations

import functools
import math
from enum import IntEnum
from typing import Any

import torch

MAX_POSITIONS = 8


class ValueClass(IntEnum):
    """IEEE class of a value, as EXC-01 and EXC-02 compare them."""

    FINITE = 0
    NAN = 1
    POS_INF = 2
    NEG_INF = 3


class FloatClass(IntEnum):
    """The classes EXC-02 compares (finer than EXC-01's: zero and subnormal are split out)."""

    ZERO = 0
    SUBNORMAL = 1
    NORMAL = 2
    INF = 3
    NAN = 4


def float_classes(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Per-element ``FloatClass`` (int8) of ``values`` rounded to ``dtype``, on their device.

    Rounding first matters: a float64 oracle value can be normal in float64 and subnormal
    (or zero) once rounded to the output dtype, which is the value an honest kernel stores.
    The rounding happens where ``values`` lie: a caller that moves them to a GPU first asks
    ``rounds_like_cpu`` whether that device rounds to ``dtype`` bit for bit as the CPU does.
    """
    t = values.detach().to(dtype)
    if t.element_size() == 1:  # float8 has no comparison kernels; float32 holds it exactly
        t = t.to(torch.float32)
    classes = torch.full(t.shape, FloatClass.NORMAL, dtype=torch.int8, device=t.device)
    classes.masked_fill_(t.abs() < torch.finfo(dtype).tiny, FloatClass.SUBNORMAL)
    classes.masked_fill_(t == 0, FloatClass.ZERO)
    classes.masked_fill_(torch.isinf(t), FloatClass.INF)
    classes.masked_fill_(torch.isnan(t), FloatClass.NAN)
    return classes


def sign_bits(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Sign bit of each element after rounding to ``dtype`` (``-0.0`` has it set), on the
    values' device (see ``float_classes`` on where the rounding happens)."""
    return torch.signbit(values.detach().to(dtype))


ROUNDING_PROBE_SIZE = 1 << 16  # random values per dtype, besides the fixed boundary values


@functools.cache
def rounds_like_cpu(device: str, dtype: torch.dtype) -> bool:
    """Whether ``device`` rounds float64 to ``dtype`` bit for bit as the CPU does.

    The exact class gates judge class and sign of ``want.to(dtype)``: judged on a GPU, an
    output of hundreds of millions of elements takes milliseconds instead of the tens of
    host seconds a dozen passes over it take in a judge sharing the host with eleven others.
    That is only sound if the device's cast neither flushes subnormals (a fast-math build)
    nor rounds twice (float64 to float32 to float16 can differ from one rounding), so this
    asks the device once per dtype: values around zero, every subnormal binade, the
    smallest normal, the largest finite value, their halfway points and one float64 ulp to
    either side of those (where a double rounding shows), and random values over the whole
    range, rounded on both and compared bitwise (NaN with NaN). Any difference, or a device
    that cannot cast to ``dtype`` at all, keeps judging on the CPU.
    """
    if torch.device(device).type == "cpu":
        return True
    probe = _rounding_probe(dtype)
    try:
        on_device = probe.to(device).to(dtype).cpu()
    except (RuntimeError, TypeError):
        return False
    return same_rounding(on_device, probe.to(dtype))


def rounding_device(values: torch.Tensor, dtype: torch.dtype) -> torch.device:
    """Where to round ``values`` to ``dtype``: where they lie, when that device rounds as the
    CPU does (``rounds_like_cpu``), else the CPU. Classes and signs of rounded values must
    not depend on where the judge keeps them (``fp64.results_device``)."""
    if rounds_like_cpu(str(values.device), dtype):
        return values.device
    return torch.device("cpu")


def same_rounding(rounded: torch.Tensor, on_cpu: torch.Tensor) -> bool:
    """Whether ``rounded`` (a cast done elsewhere, brought to the CPU) has the bits of the
    CPU's cast ``on_cpu`` at every position, NaN matching NaN whatever its payload."""
    both_nan = torch.isnan(on_cpu.to(torch.float64)) & torch.isnan(rounded.to(torch.float64))
    same = element_bytes(on_cpu).eq(element_bytes(rounded)).all(dim=1) | both_nan
    return bool(same.all())


def _rounding_probe(dtype: torch.dtype) -> torch.Tensor:
    """float64 values where a cast to ``dtype`` is most likely to go wrong (``rounds_like_cpu``)."""
    if not (dtype.is_floating_point or dtype.is_complex):
        return _integer_probe(dtype)
    info = torch.finfo(dtype)
    tiny, eps, largest = float(info.tiny), float(info.eps), float(info.max)
    smallest = tiny * eps
    g = torch.Generator().manual_seed(0)
    # multiples of a quarter of the smallest subnormal: exact values, ties and quarter points
    steps = torch.randint(0, int(4 / eps) * 2, (ROUNDING_PROBE_SIZE,), generator=g)
    subnormal = steps.double() * (smallest / 4)
    # random magnitudes over every binade from below the smallest subnormal to past the max
    low, high = math.log2(smallest) - 2, math.log2(largest) + 1
    spread = torch.exp2(
        torch.rand(ROUNDING_PROBE_SIZE, generator=g, dtype=torch.float64) * (high - low) + low
    )
    fixed = torch.tensor(
        [
            0.0,
            smallest,
            smallest / 2,
            tiny,
            tiny - smallest / 2,
            tiny - smallest,
            largest,
            largest * (1 + eps / 2),
            largest * (1 + eps),
            math.inf,
            math.nan,
        ],
        dtype=torch.float64,
    )
    values = torch.cat([subnormal, spread, fixed])
    ulp = torch.finfo(torch.float64).eps
    values = torch.cat([values, values * (1 - ulp), values * (1 + ulp)])
    return torch.cat([values, -values])


def _integer_probe(dtype: torch.dtype) -> torch.Tensor:
    """float64 values for a cast to an integer or bool ``dtype``: integers over the range,
    its ends, fractions either side of zero (truncation). Values with no integer (NaN,
    infinities, beyond the range) are left out: C leaves their cast undefined, so CUDA and
    the CPU may disagree there, and they never arise: an integer output's float64 oracle
    values are that output's integers."""
    if dtype == torch.bool:
        low, high = 0.0, 1.0
    else:
        info = torch.iinfo(dtype)
        low, high = float(info.min), float(info.max)
        if high > info.max:  # int64's max is no float64: the nearest is 2**63, past the range
            high = math.nextafter(high, 0.0)
    g = torch.Generator().manual_seed(0)
    inside = torch.rand(ROUNDING_PROBE_SIZE, generator=g, dtype=torch.float64)
    inside = (low + inside * (high - low)).clamp(low, high)
    edges = torch.tensor([0.0, -0.0, 0.25, 0.5, 0.75, -0.5, low, high], dtype=torch.float64)
    integers = torch.cat([inside, edges]).trunc()
    return torch.cat([integers, edges[:6]])


def value_classes(tensor: torch.Tensor) -> torch.Tensor:
    """Per-element ``ValueClass`` codes (int8, on the tensor's device); integers are FINITE."""
    classes = torch.zeros(tensor.shape, dtype=torch.int8, device=tensor.device)
    if not (tensor.is_floating_point() or tensor.is_complex()):
        return classes
    t = tensor.detach()
    classes[torch.isnan(t)] = ValueClass.NAN
    classes[t == float("inf")] = ValueClass.POS_INF
    classes[t == float("-inf")] = ValueClass.NEG_INF
    return classes


def element_bytes(tensor: torch.Tensor, device: torch.device | str = "cpu") -> torch.Tensor:
    """``[numel, itemsize]`` uint8 view of a tensor's elements in logical order, on
    ``device``."""
    flat = tensor.detach().to(device).contiguous().reshape(-1)
    return flat.view(torch.uint8).view(flat.numel(), flat.element_size())


def judging_device(*tensors: torch.Tensor) -> torch.device:
    """Where to compare ``tensors``: the first one's device that is not the host, else the
    host. A candidate's output arrives on the device (CUDA IPC) and the oracle's results
    are kept there (``fp64.results_device``): comparing there moves neither, and only the
    few positions and counts a judgement reports come to the host."""
    return next((t.device for t in tensors if t.device.type != "cpu"), torch.device("cpu"))


def bitwise_mismatches(a: torch.Tensor, b: torch.Tensor) -> list[tuple[int, ...]]:
    """Logical positions where ``a`` and ``b`` differ in any byte (shapes must agree)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return [()]
    if a.numel() == 0:
        return []
    # On the device when either lies there (a candidate's output, come by IPC handle): only
    # the mismatching positions reach the host.
    device = judging_device(b, a)
    differs = (element_bytes(a, device) != element_bytes(b, device)).any(dim=1)
    return unravel(torch.nonzero(differs).flatten()[:MAX_POSITIONS], a.shape)


def first_output_difference(
    first: list[Any], second: list[Any], labels: tuple[str, str]
) -> tuple[int, list[dict[str, Any]]] | None:
    """The first tensor output whose bytes differ between two runs, with its findings.

    ``labels`` name the two runs in each finding (e.g. the two poisons, or two calls).
    """
    for k, (a, b) in enumerate(zip(first, second)):
        if not isinstance(a, torch.Tensor):
            continue
        positions = bitwise_mismatches(a, b)
        if positions:
            findings = [
                {
                    "output": k,
                    "output_position": list(p),
                    labels[0]: scalar(a[p]),
                    labels[1]: scalar(b[p]),
                }
                for p in positions
                if p
            ]
            return k, findings or [{"output": k, "problem": "shape or dtype changed"}]
    return None


def unravel(
    flat_indices: torch.Tensor, shape: torch.Size | tuple[int, ...]
) -> list[tuple[int, ...]]:
    positions = []
    for flat in flat_indices.tolist():
        index = []
        for size in reversed(shape):
            index.append(flat % size)
            flat //= size
        positions.append(tuple(reversed(index)))
    return positions


def first_positions(mask: torch.Tensor) -> list[tuple[int, ...]]:
    return unravel(torch.nonzero(mask.reshape(-1)).flatten()[:MAX_POSITIONS], mask.shape)


def scalar(value: torch.Tensor) -> float | str:
    """A JSON-friendly rendering of one element for counterexamples."""
    v = value.item()
    if isinstance(v, float) and (v != v or v in (float("inf"), float("-inf"))):
        return repr(v)
    return v
