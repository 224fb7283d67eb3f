"""Memory layouts for CMP-02: the same logical values, placed in other (shape, stride, offset)s.

A kernel that indexes ``x_ptr + i`` instead of ``x_ptr + i * stride`` is right on the
contiguous inputs every benchmark sends and wrong on a slice, a transpose or a broadcast. The
judge builds each layout inside a guarded storage (poisoned bands on both sides, see
``placement``); the worker rebuilds exactly the (shape, stride, offset) it is sent over the
storage it receives, so the candidate sees a genuine strided view, not a copy.

Every placement keeps the *logical* values unchanged, so the fp64 oracle's answer is the
same as for the contiguous input and any difference is the layout's fault:

- ``offset``: contiguous, but the view starts one element past the 16-byte-aligned guard,
  so the data pointer breaks 16-byte alignment (vectorised loads that assume it read wrong).
- ``strided``: every dim is a slice of a larger buffer: outer dims padded by one, the
  innermost taken with step 2. The gaps hold poison.
- ``transposed``: the storage holds the values with two dims swapped; the view permutes them
  back (a non-unit innermost stride, as ``x.t()`` gives).
- ``expanded``: a stride of 0 along one dim (a broadcast); only valid where the logical
  values are constant along that dim, so the case's values are made so first
  (``expandable``).

Misalignment combines with every layout (``misaligned=True`` shifts the view by one
element). Storages are padded after the view with at least as many poisoned bytes as the
logical tensor holds, so a kernel that ignores strides and reads ``numel`` elements reads
poison (a value failure with a counterexample) instead of running off the allocation.
"""

from __future__ import annotations

import math

import torch

from kernelgate.contract.spec import Layout
from kernelgate.inputs.placement import (
    GUARD_BYTES,
    POISONS,
    PlacedTensor,
    contiguous_strides,
    poison_fill,
)

ALIGNMENT = 16  # bytes: the alignment Triton and vectorised CUDA loads specialise on

# Non-contiguous layouts CMP-02 exercises, in the order it runs them.
VIEW_LAYOUTS: tuple[Layout, ...] = (Layout.STRIDED, Layout.TRANSPOSED, Layout.EXPANDED)


def can_misalign(dtype: torch.dtype) -> bool:
    """A one-element shift breaks 16-byte alignment only for items narrower than 16 bytes."""
    return (torch.empty((), dtype=dtype).element_size() % ALIGNMENT) != 0


def transposed_dims(shape: tuple[int, ...]) -> tuple[int, int] | None:
    """The two dims to swap: the last two with size > 1 (a swap of size-1 dims is no change)."""
    big = [d for d, size in enumerate(shape) if size > 1]
    return (big[-2], big[-1]) if len(big) >= 2 else None


def expanded_dim(shape: tuple[int, ...]) -> int | None:
    """The dim to broadcast along: the outermost with size > 1 (None if there is none)."""
    return next((d for d, size in enumerate(shape) if size > 1), None)


def applicable(layout: Layout, shape: tuple[int, ...]) -> bool:
    """Whether ``layout`` makes a view that differs from the contiguous one for ``shape``."""
    if math.prod(shape) <= 1 and layout is not Layout.OFFSET:
        return False
    if layout is Layout.TRANSPOSED:
        return transposed_dims(shape) is not None
    if layout is Layout.EXPANDED:
        return expanded_dim(shape) is not None
    return len(shape) >= 1 or layout is Layout.OFFSET


def expandable(values: torch.Tensor) -> torch.Tensor:
    """Values constant along ``expanded_dim``: what a stride-0 broadcast can represent.

    The first slice along that dim is repeated; the result is materialised (contiguous) so
    the oracle and every other consumer see ordinary values.
    """
    dim = expanded_dim(tuple(values.shape))
    if dim is None:
        return values
    return values.narrow(dim, 0, 1).expand_as(values).contiguous()


def place_layout(
    values: torch.Tensor,
    layout: Layout,
    *,
    misaligned: bool = False,
    poison: int = POISONS[0],
    guard_bytes: int = GUARD_BYTES,
    device: torch.device | str | None = None,
) -> PlacedTensor:
    """Place ``values`` (logical, any layout) as ``layout`` in a poisoned, guarded storage
    on ``device`` (the host when None; see ``PlacedTensor.place``).

    For ``expanded`` the values must already be constant along ``expanded_dim`` (see
    ``expandable``); a ValueError says so otherwise, since a broadcast cannot hold them.
    """
    values = values.detach()
    shape = tuple(values.shape)
    itemsize = values.element_size()
    guard = -(-guard_bytes // itemsize)
    shift = 1 if misaligned and can_misalign(values.dtype) else 0
    numel = math.prod(shape)

    if layout in (Layout.CONTIGUOUS, Layout.OFFSET) or not applicable(layout, shape):
        placed = PlacedTensor.place(
            values, poison=poison, guard_bytes=guard_bytes, shift_elements=shift, device=device
        )
        placed.layout = "offset" if shift else "contiguous"
        return placed

    if layout is Layout.STRIDED:
        base_shape = (*[s + 1 for s in shape[:-1]], 2 * shape[-1])
        base_strides = contiguous_strides(base_shape)
        stride = (*base_strides[:-1], 2)
        span = math.prod(base_shape)
        write_shape, write_stride = shape, stride
        source = values
    elif layout is Layout.TRANSPOSED:
        i, j = transposed_dims(shape)  # type: ignore[misc]
        swapped = list(shape)
        swapped[i], swapped[j] = swapped[j], swapped[i]
        swapped_strides = list(contiguous_strides(tuple(swapped)))
        swapped_strides[i], swapped_strides[j] = swapped_strides[j], swapped_strides[i]
        stride = tuple(swapped_strides)
        span = numel
        write_shape, write_stride = shape, stride
        source = values
    elif layout is Layout.EXPANDED:
        dim = expanded_dim(shape)
        assert dim is not None
        first = values.narrow(dim, 0, 1)
        if not bool((values == first).all()) and not bool((values.isnan() & first.isnan()).all()):
            raise ValueError("expanded layout needs values constant along the expanded dim")
        compact_shape = tuple(1 if d == dim else s for d, s in enumerate(shape))
        compact_strides = contiguous_strides(compact_shape)
        stride = tuple(0 if d == dim else st for d, st in enumerate(compact_strides))
        span = math.prod(compact_shape)
        write_shape, write_stride = compact_shape, compact_strides
        source = first
    else:  # pragma: no cover - every Layout is handled above
        raise ValueError(f"unknown layout {layout!r}")

    # Pad after the view by at least the logical size, so a kernel that ignores strides and
    # walks numel contiguous elements reads poison, not whatever lies past the allocation.
    tail = max(guard, numel)
    storage = torch.empty(guard + shift + span + tail, dtype=values.dtype, device=device or "cpu")
    poison_fill(storage, poison)
    offset = guard + shift
    storage.as_strided(write_shape, write_stride, offset).copy_(source)
    placed = PlacedTensor(storage, shape, stride, offset, poison, layout=layout.value)
    return placed


def layout_of(value: torch.Tensor) -> tuple[Layout, bool]:
    """The layout ``value`` has, as CMP-02 names its cases: (layout, 16-byte misaligned).

    For the reference's own inputs: a fault at a layout they have is a fault at the
    reference point (RES-01 rejects), not an unguarded precondition of another layout.
    """
    misaligned = (value.storage_offset() * value.element_size()) % ALIGNMENT != 0
    shape, stride = tuple(value.shape), tuple(value.stride())
    if any(st == 0 and size > 1 for size, st in zip(shape, stride, strict=True)):
        return Layout.EXPANDED, misaligned
    if value.is_contiguous():
        return Layout.CONTIGUOUS, misaligned
    order = sorted((d for d in range(len(shape)) if shape[d] > 1), key=lambda d: -stride[d])
    if value.permute(*order, *[d for d in range(len(shape)) if d not in order]).is_contiguous():
        return Layout.TRANSPOSED, misaligned
    return Layout.STRIDED, misaligned
