"""Poisoned, guarded allocation inside the worker.

While a candidate call runs, ``torch.empty`` and its siblings hand out memory filled with a
poison byte and surrounded by poisoned guard bands. An output the kernel never wrote then
shows the poison (and differs between two poisons: MEM-01); a write past the end of a buffer
lands in a guard band the judge inspects. On CUDA the caching allocator is flooded with the
same poison so that allocations made from C++ (``torch::empty``) are poisoned too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from kernelgate.sandbox.wire import view_extent

_ORIGINAL: dict[str, Callable[..., torch.Tensor]] = {
    "empty": torch.empty,
    "empty_like": torch.empty_like,
    "empty_strided": torch.empty_strided,
    "new_empty": torch.Tensor.new_empty,
}
_UNSAFE_KWARGS = {"out", "pin_memory", "layout", "names"}

# The "fnuz" float8 dtypes (AMD's) have no negative zero: their only NaN is the byte 0x80,
# and all-ones (0xFF) is the finite -max. Every other floating dtype torch has reads
# all-ones as NaN (float8_e4m3fn and float8_e5m2 included; float8_e8m0fnu's only NaN is
# 0xFF), which is what the NaN poison counts on. Looked up by name: older torch lacks them.
_NAN_ONLY_AT_0X80 = frozenset(
    dtype
    for name in ("float8_e4m3fnuz", "float8_e5m2fnuz")
    if isinstance(dtype := getattr(torch, name, None), torch.dtype)
)
NAN_POISON = 0xFF


def poison_byte(dtype: torch.dtype, byte: int) -> int:
    """The byte that fills storages of ``dtype`` for the poison ``byte``.

    The NaN poison (``NAN_POISON``) must read as NaN in every floating dtype, so that a
    kernel that reads a guard band or an unwritten allocation shows NaN, not a plausible
    value; in the fnuz float8 dtypes that byte is 0x80. Any other poison stays as it is.
    """
    return 0x80 if byte == NAN_POISON and dtype in _NAN_ONLY_AT_0X80 else byte


@dataclass
class GuardedAllocation:
    base: torch.Tensor  # 1-D storage, guards included
    guard: int  # elements before the view
    extent: int  # elements the view spans


class PoisonAllocator:
    """Patches the ``empty`` family for the duration of ``active(poison, guard_bytes)``."""

    def __init__(self) -> None:
        self.allocations: list[GuardedAllocation] = []
        self._byte = 0xFF
        self._guard_bytes = 0

    @contextlib.contextmanager
    def active(self, byte: int, guard_bytes: int) -> Iterator[None]:
        self.allocations = []
        self._byte, self._guard_bytes = byte, guard_bytes
        torch.empty = self._wrap("empty", lambda args, kw: kw.get("device"))
        torch.empty_like = self._wrap(
            "empty_like", lambda args, kw: kw.get("device", args[0].device)
        )
        torch.empty_strided = self._wrap("empty_strided", lambda args, kw: kw.get("device"))
        torch.Tensor.new_empty = self._wrap(
            "new_empty", lambda args, kw: kw.get("device", args[0].device)
        )
        try:
            yield
        finally:
            torch.empty = _ORIGINAL["empty"]
            torch.empty_like = _ORIGINAL["empty_like"]
            torch.empty_strided = _ORIGINAL["empty_strided"]
            torch.Tensor.new_empty = _ORIGINAL["new_empty"]

    def _wrap(
        self, name: str, device_of: Callable[[tuple[Any, ...], dict[str, Any]], Any]
    ) -> Callable[..., torch.Tensor]:
        original = _ORIGINAL[name]

        def allocate(*args: Any, **kwargs: Any) -> torch.Tensor:
            if _UNSAFE_KWARGS & kwargs.keys():
                result = original(*args, **kwargs)
                _fill(result, poison_byte(result.dtype, self._byte))
                return result
            try:
                device = torch.device(device_of(args, kwargs) or torch.get_default_device())
                template = original(*args, **{**kwargs, "device": "meta"})
            except Exception:
                return original(*args, **kwargs)
            return self._guarded(template, device, kwargs.get("requires_grad", False))

        allocate.__name__ = allocate.__qualname__ = name
        allocate.__doc__ = original.__doc__
        return allocate

    def _guarded(self, template: torch.Tensor, device: torch.device, grad: bool) -> torch.Tensor:
        itemsize = template.element_size()
        guard = -(-self._guard_bytes // itemsize)
        shape, stride = tuple(template.shape), tuple(template.stride())
        extent = view_extent(shape, stride)
        base = _ORIGINAL["empty"](2 * guard + extent, dtype=template.dtype, device=device)
        _fill(base, poison_byte(base.dtype, self._byte))
        self.allocations.append(GuardedAllocation(base, guard, extent))
        result = base.as_strided(shape, stride, guard)
        return result.requires_grad_(grad) if grad else result


def _fill(tensor: torch.Tensor, byte: int) -> None:
    raw = _ORIGINAL["empty"](0, dtype=torch.uint8, device=tensor.device)
    raw.set_(tensor.untyped_storage())
    raw.fill_(byte)


def flood_device_cache(device: torch.device, nbytes: int, byte: int) -> None:
    """Leave poisoned blocks in the CUDA caching allocator's free pools.

    Large blocks of decreasing size fill the large pool; many 512 KiB blocks fill whole
    2 MiB segments of the small pool (allocations up to 1 MiB are served from there).
    """
    if device.type != "cuda" or nbytes <= 0:
        return
    sizes = [nbytes >> shift for shift in range(0, 8, 2)] + [512 * 1024] * 64
    blocks = []
    for size in sizes:
        block = _ORIGINAL["empty"](max(size, 512), dtype=torch.uint8, device=device)
        block.fill_(byte)
        blocks.append(block)
    torch.cuda.synchronize(device)
    del blocks
