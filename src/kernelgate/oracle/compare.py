"""Exact comparisons: value classes and bitwise equality, position by position.

Everything here runs in the judge on tensors rebuilt from raw bytes, so a candidate that
monkeypatches ``torch.equal`` or ``Tensor.__eq__`` in its own process changes nothing.
"""

from __future__ import annotations

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
    """Per-element ``FloatClass`` (int8) of ``values`` rounded to ``dtype``.

    Rounding first matters: a float64 oracle value can be normal in float64 and subnormal
    (or zero) once rounded to the output dtype, which is the value an honest kernel stores.
    """
    t = values.detach().cpu().to(dtype)
    magnitude = t.abs()
    classes = torch.full(t.shape, FloatClass.NORMAL, dtype=torch.int8)
    classes[magnitude < torch.finfo(dtype).tiny] = FloatClass.SUBNORMAL
    classes[t == 0] = FloatClass.ZERO
    classes[torch.isinf(t)] = FloatClass.INF
    classes[torch.isnan(t)] = FloatClass.NAN
    return classes


def sign_bits(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Sign bit of each element after rounding to ``dtype`` (``-0.0`` has it set)."""
    return torch.signbit(values.detach().cpu().to(dtype))


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


def bitwise_mismatches(a: torch.Tensor, b: torch.Tensor) -> list[tuple[int, ...]]:
    """Logical positions where ``a`` and ``b`` differ in any byte (shapes must agree)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return [()]
    if a.numel() == 0:
        return []
    # On the device when either lies there (a candidate's output, come by IPC handle): only
    # the mismatching positions reach the host.
    device = b.device if b.device.type != "cpu" else a.device
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
