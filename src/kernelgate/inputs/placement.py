"""Where an input tensor lives: a storage with poisoned guard bands around the view.

Every tensor the judge sends sits inside a larger storage. The bytes before and after the
view (the guard bands) hold a poison pattern; after the call the judge checks they are
intact (no out-of-bounds write) and, by changing the poison between runs, that the output
does not depend on them (no out-of-bounds read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from kernelgate.oracle.compare import bitwise_mismatches
from kernelgate.sandbox.poison import NAN_POISON, poison_byte
from kernelgate.sandbox.wire import WireTensor, dtype_name, view_extent

GUARD_BYTES = 16 * 1024
# NAN_POISON (all-ones bytes) is NaN in every floating dtype but the fnuz float8 ones, which
# get their NaN byte 0x80 instead (``poison_byte``); 0x5A... is finite in every dtype.
POISONS = (NAN_POISON, 0x5A)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Row-major strides of ``shape``, as ``torch.empty(shape).stride()`` gives them
    (a dimension of size 0 or 1 counts as 1), without allocating anything."""
    strides: list[int] = []
    step = 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def poison_fill(storage: torch.Tensor, byte: int) -> None:
    """Fill ``storage`` with the poison ``byte`` as it reads in the storage's dtype."""
    storage.view(torch.uint8).fill_(poison_byte(storage.dtype, byte))


@dataclass
class PlacedTensor:
    """A logical input value placed in a guarded storage (judge side: the host, or the
    device on the CUDA IPC path)."""

    storage: torch.Tensor
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    poison: int
    layout: str = "contiguous"

    @classmethod
    def place(
        cls,
        values: torch.Tensor,
        *,
        poison: int = POISONS[0],
        guard_bytes: int = GUARD_BYTES,
        shift_elements: int = 0,
        device: torch.device | str | None = None,
    ) -> PlacedTensor:
        """Copy ``values`` into a fresh contiguous view surrounded by poisoned guard bands.

        ``shift_elements`` moves the view off the guard's 16-byte alignment (CMP-02).
        ``device``: where the storage lives (the host when None). On the CUDA IPC path the
        judge places on the device: the poison fill and the copy then cost the host nothing
        but the one upload of the values, where a host storage cost a fill, a copy and the
        upload, each a pass over every byte on a judge given one core in an audit.
        """
        values = values.detach()
        itemsize = values.element_size()
        guard = -(-guard_bytes // itemsize)
        numel = values.numel()
        storage = torch.empty(
            2 * guard + shift_elements + numel, dtype=values.dtype, device=device or "cpu"
        )
        poison_fill(storage, poison)
        offset = guard + shift_elements
        shape = tuple(values.shape)
        placed = cls(storage, shape, contiguous_strides(shape), offset, poison)
        placed.view().copy_(values)
        return placed

    def view(self) -> torch.Tensor:
        return self.storage.as_strided(self.shape, self.stride, self.offset)

    @property
    def extent(self) -> int:
        return view_extent(self.shape, self.stride)

    def as_wire(self) -> WireTensor:
        return WireTensor(self.storage, self.shape, self.stride, self.offset)

    def describe(self) -> dict[str, Any]:
        itemsize = self.storage.element_size()
        return {
            "shape": list(self.shape),
            "stride": list(self.stride),
            "dtype": dtype_name(self.storage.dtype),
            "storage_offset": self.offset,
            "byte_misalignment_16": (self.offset * itemsize) % 16,
            "layout": self.layout,
        }


def guard_damage(sent: PlacedTensor, returned: WireTensor) -> list[int]:
    """Storage indices (elements) outside the view whose bytes changed during the call."""
    # Compared where the returned storage lies (the device, when it came by IPC handle):
    # only the few changed indices reach the host.
    device = returned.storage.device
    before = sent.storage.view(torch.uint8).to(device)
    after = returned.storage.view(torch.uint8)
    if before.numel() != after.numel():
        return [-1]
    itemsize = sent.storage.element_size()
    inside = torch.zeros(sent.storage.numel(), dtype=torch.bool, device=device)
    if sent.extent:
        inside.as_strided(sent.shape, sent.stride, sent.offset).fill_(True)
    changed = (before != after).view(-1, itemsize).any(dim=1)
    return torch.nonzero(changed & ~inside).flatten().tolist()[:16]


def view_bytes_changed(sent: PlacedTensor, returned: WireTensor) -> list[tuple[int, ...]]:
    """Positions of the logical input whose bytes changed during the call."""
    after = returned.storage.as_strided(sent.shape, sent.stride, sent.offset)
    return bitwise_mismatches(sent.view(), after)
