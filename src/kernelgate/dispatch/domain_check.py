"""A contract's input domain, compiled into a check cheap enough to run before every call.

``CompiledDomain(contract, device).reason(args, kwargs)`` is ``None`` when the call's inputs
lie inside the contract's domain and a short sentence saying why not otherwise. Everything
the contract states is turned into plain Python data once, at construction (a frozenset of
``torch.dtype`` per input, ``(axis, slot)`` pairs binding each named dim, ``(lo, hi, k)``
per dim), so a call pays a handful of tensor attribute reads and integer comparisons: the
guard must cost less than the few microseconds a small kernel launch takes.

What an input's memory layout needs, as CMP-02 tested it (``inputs/layouts.py``):

- contiguous (``Tensor.is_contiguous``, which ignores size-1 dims) needs nothing;
- a stride of 0 along a dim of size > 1 (a broadcast) needs ``expanded``;
- the dims of size > 1 not in decreasing-stride order (a permutation) needs ``transposed``;
- gaps between the elements (a slice with a step, padded rows) need ``strided``;
- a data pointer off 16-byte alignment needs ``offset``.

A view showing several of these needs every one of them admitted; a view whose elements
overlap (``as_strided`` with too small a stride) lies in no layout and goes to the reference.

Value restrictions (``values = "finite"``, ``value_range``, an integer domain's bounds and
``sorted`` structure) cost a device reduction and a synchronisation each, so they are
checked only where the contract states them, and only when the caller does not vouch for
the values (``trust_values``). What cannot be checked per call at all (``fixed`` values,
``unique`` structures, bounds that follow another input) is listed in ``unchecked``.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kernelgate.contract.spec import (
    Contract,
    IntegerStructure,
    Layout,
    ScalarSpec,
    TensorSpec,
    ValueDomain,
)
from kernelgate.inputs.specials import nonfinite
from kernelgate.sandbox.wire import DTYPES

ALIGNMENT_MASK = 15  # data_ptr & 15: off the 16-byte alignment CMP-02's "offset" breaks
NO_UPPER_BOUND = math.inf
LAYOUT_CACHE_SIZE = 4096  # distinct (shape, stride) pairs remembered by ``layout_needs``


def device_index(device: torch.device) -> int:
    """What ``Tensor.get_device()`` returns for a tensor on ``device`` (-1 on the CPU)."""
    if device.type == "cpu":
        return -1
    if device.index is not None:
        return device.index
    if device.type == "cuda":
        return torch.cuda.current_device()
    raise ValueError(f"dispatch supports cpu and cuda devices, not {device}")


@functools.lru_cache(maxsize=LAYOUT_CACHE_SIZE)
def layout_needs(shape: tuple[int, ...], stride: tuple[int, ...]) -> frozenset[Layout] | None:
    """The layouts a view of ``shape`` and ``stride`` needs admitted beside ``contiguous``
    (empty for a contiguous view), or None when its elements overlap (no layout has them).

    Cached: a program calls a kernel with few distinct views, and a dict look-up costs a
    fraction of sorting the strides again on every call."""
    needs: set[Layout] = set()
    live: list[tuple[int, int]] = []  # (stride, size) of the dims that address memory
    for size, step in zip(shape, stride):
        if size <= 1:
            continue
        if step == 0:
            needs.add(Layout.EXPANDED)
        else:
            live.append((step, size))
    if any(live[k][0] <= live[k + 1][0] for k in range(len(live) - 1)):
        needs.add(Layout.TRANSPOSED)
    span = 1  # elements the dims so far reach: the next dim's stride must clear it
    for step, size in sorted(live):
        if step < span:
            return None
        if step > span:
            needs.add(Layout.STRIDED)
        span = step * (size - 1) + 1
    return frozenset(needs)


@dataclass(frozen=True)
class DimBound:
    """``lo <= value <= hi`` and ``value % multiple_of == 0``, a dim's admitted sizes."""

    name: str
    lo: int
    hi: float  # an int, or inf: no upper bound
    multiple_of: int

    def text(self) -> str:
        upper = "inf" if self.hi == NO_UPPER_BOUND else int(self.hi)
        step = f", % {self.multiple_of} == 0" if self.multiple_of > 1 else ""
        return f"{self.name} in [{self.lo}, {upper}]{step}"


@dataclass(frozen=True)
class TensorCheck:
    """One tensor input's compiled preconditions (see ``CompiledDomain``)."""

    position: int
    name: str
    dtypes: frozenset[torch.dtype]
    ndim: int
    literal_axes: tuple[tuple[int, int], ...]  # (axis, size) for literal sizes
    dim_axes: tuple[tuple[int, int], ...]  # (axis, slot in CompiledDomain.bounds)
    layouts: frozenset[Layout]
    misaligned_ok: bool  # "offset" admitted
    may_alias: bool


ValueCheck = Callable[[torch.Tensor], str | None]


class CompiledDomain:
    """A contract's preconditions, ready to test a call's ``(args, kwargs)`` quickly.

    ``device``: where the inputs must live (the candidate was loaded there). Inputs that
    need autograd (``requires_grad`` under grad mode) lie outside: the gates judged the
    forward values only, never a backward.
    """

    def __init__(
        self, contract: Contract, device: torch.device | str, *, trust_values: bool = False
    ) -> None:
        self.contract_name = contract.name
        self.device = torch.device(device)
        self.device_index = device_index(self.device)
        self.arity = len(contract.inputs)
        dims = {dim.name: dim for dim in contract.dims}
        slots: dict[str, int] = {}
        bounds: list[DimBound] = []
        tensors: list[TensorCheck] = []
        scalars: list[tuple[int, str, Any]] = []
        self.unchecked: list[str] = []
        self.value_checks: list[tuple[int, str, ValueCheck]] = []
        for position, spec in enumerate(contract.inputs):
            if isinstance(spec, ScalarSpec):
                scalars.append((position, spec.name, spec.value))
                continue
            literal_axes, dim_axes = [], []
            for axis, size in enumerate(spec.shape):
                if isinstance(size, int):
                    literal_axes.append((axis, size))
                    continue
                if size not in slots:
                    slots[size] = len(bounds)
                    bounds.append(self._bound(size, dims.get(size)))
                dim_axes.append((axis, slots[size]))
            tensors.append(
                TensorCheck(
                    position=position,
                    name=spec.name,
                    dtypes=frozenset(DTYPES[d] for d in spec.dtypes if d in DTYPES),
                    ndim=len(spec.shape),
                    literal_axes=tuple(literal_axes),
                    dim_axes=tuple(dim_axes),
                    layouts=frozenset(spec.layouts) | {Layout.CONTIGUOUS},
                    misaligned_ok=Layout.OFFSET in spec.layouts,
                    may_alias=spec.may_alias,
                )
            )
            self._compile_values(position, spec, trust_values)
        self.tensors = tuple(tensors)
        self.scalars = tuple(scalars)
        self.bounds = tuple(bounds)
        self.check_aliasing = len(tensors) > 1 and not all(t.may_alias for t in tensors)
        self.admits_source, self.admits = self._generate_admits()

    @staticmethod
    def _bound(name: str, dim: Any) -> DimBound:
        if dim is None:  # a size the contract names but never bounds: any size
            return DimBound(name, 0, NO_UPPER_BOUND, 1)
        if not dim.varies:
            return DimBound(name, dim.reference, dim.reference, 1)
        upper = NO_UPPER_BOUND if dim.max is None else dim.max
        return DimBound(name, dim.min, upper, max(dim.multiple_of, 1))

    def _compile_values(self, position: int, spec: TensorSpec, trust: bool) -> None:
        """The per-call value checks the contract asks for (none when ``trust``)."""
        wanted: list[tuple[str, ValueCheck]] = []
        floating = any(DTYPES.get(d, torch.int8).is_floating_point for d in spec.dtypes)
        if floating and spec.values is ValueDomain.FINITE:
            wanted.append(("finite", _finite))
        if spec.value_range is not None:
            low, high = spec.value_range
            wanted.append((f"in {spec.value_range}", _within(low, high)))
        domain = spec.domain
        if domain is not None and not domain.any:
            if domain.index_into is None:
                wanted.append((f"in [{domain.min}, {domain.max}]", _within(domain.min, domain.max)))
            else:
                self.unchecked.append(f"{spec.name}: bound that follows {domain.index_into}")
            for structure in domain.structure:
                if structure is IntegerStructure.SORTED:
                    wanted.append(("sorted along the last dim", _sorted_last))
                else:
                    self.unchecked.append(f"{spec.name}: structure {structure.value}")
        if trust:
            return
        self.value_checks.extend((position, f"{spec.name} {what}", fn) for what, fn in wanted)

    def _generate_admits(self) -> tuple[str, Callable[[Sequence[Any], dict[str, Any]], bool]]:
        """``admits(args, kwargs)``: ``reason(args, kwargs) is None``, as straight-line code.

        The guard calls this on every call, so it is written out for this contract alone
        (as ``dataclasses`` writes ``__init__``): each input's checks in turn, sizes and
        bounds as literals, no loop over specs and no attribute of ``self`` read, which
        halves the cost of the general ``reason``. Its source is kept in ``admits_source``.
        """
        lines = [
            "def admits(args, kwargs):",
            f"    if kwargs or len(args) != {self.arity}:",
            "        return False",
        ]
        names: dict[str, Any] = {
            "Tensor": torch.Tensor,
            "is_grad_enabled": torch.is_grad_enabled,
            "layout_needs": layout_needs,
            "same_scalar": same_scalar,
            "span_bytes": span_bytes,
        }
        if self.tensors:
            lines.append("    grad = is_grad_enabled()")
        bound_slots: set[int] = set()
        on_device = f"value.get_device() != {self.device_index}"
        if self.device_index < 0:
            on_device += " or not value.is_cpu"  # a meta tensor's get_device() is -1 too

        def reject_if(condition: str) -> None:
            lines.extend([f"    if {condition}:", "        return False"])

        for index, check in enumerate(self.tensors):
            names[f"dtypes_{index}"] = check.dtypes
            names[f"layouts_{index}"] = check.layouts
            lines.append(f"    value = args[{check.position}]")
            reject_if(f"not isinstance(value, Tensor) or value.dtype not in dtypes_{index}")
            reject_if(on_device)
            reject_if("grad and value.requires_grad")
            lines.append("    shape = value.shape")
            reject_if(f"len(shape) != {check.ndim}")
            for axis, size in check.literal_axes:
                reject_if(f"shape[{axis}] != {size}")
            for axis, slot in check.dim_axes:
                if slot in bound_slots:
                    reject_if(f"shape[{axis}] != size_{slot}")
                    continue
                bound_slots.add(slot)
                dim = self.bounds[slot]
                lines.append(f"    size_{slot} = shape[{axis}]  # {dim.name}")
                tests = [f"size_{slot} < {dim.lo}"]
                if dim.hi != NO_UPPER_BOUND:
                    tests.append(f"size_{slot} > {int(dim.hi)}")
                if dim.multiple_of > 1:
                    tests.append(f"size_{slot} % {dim.multiple_of}")
                reject_if(" or ".join(tests))
            lines.append("    contiguous = value.is_contiguous()")
            if check.layouts <= {Layout.CONTIGUOUS, Layout.OFFSET}:
                reject_if("not contiguous")
            else:
                lines.append("    if not contiguous:")
                lines.append("        needs = layout_needs(shape, value.stride())")
                lines.append(f"        if needs is None or not needs <= layouts_{index}:")
                lines.append("            return False")
            if self.check_aliasing or not check.misaligned_ok:
                lines.append(f"    start_{index} = value.data_ptr()")
            if not check.misaligned_ok:
                reject_if(f"start_{index} & {ALIGNMENT_MASK}")
            if self.check_aliasing:  # the bytes it spans, to compare with the others'
                lines.append(
                    f"    end_{index} = start_{index} + "
                    "(value.nbytes if contiguous else span_bytes(value))"
                )
        for position, _, expected in self.scalars:
            names[f"scalar_{position}"] = expected
            reject_if(f"not same_scalar(args[{position}], scalar_{position})")
        for first, second in itertools.combinations(range(len(self.tensors)), 2):
            if self.check_aliasing and not (
                self.tensors[first].may_alias and self.tensors[second].may_alias
            ):
                reject_if(f"start_{first} < end_{second} and start_{second} < end_{first}")
        for number, (position, _, value_check) in enumerate(self.value_checks):
            names[f"value_check_{number}"] = value_check
            reject_if(f"value_check_{number}(args[{position}]) is not None")
        lines.append("    return True")
        source = "\n".join(lines) + "\n"
        exec(compile(source, f"<kernelgate domain {self.contract_name}>", "exec"), names)
        return source, names["admits"]

    def reason(self, args: Sequence[Any], kwargs: dict[str, Any] | None = None) -> str | None:
        """None when ``args`` lie inside the domain; else why not (one sentence).

        The fast path: arity, then per tensor its type, dtype, device, autograd, rank,
        sizes, contiguity and alignment; strides are read only for a non-contiguous view.
        """
        if kwargs:
            return f"keyword arguments {sorted(kwargs)} (the contract is positional)"
        if len(args) != self.arity:
            return f"{len(args)} arguments, the contract has {self.arity}"
        grad = torch.is_grad_enabled()
        on_cpu = self.device_index < 0  # a meta tensor's get_device() is -1 as well
        sizes: list[int | None] = [None] * len(self.bounds)
        for check in self.tensors:
            value = args[check.position]
            if not isinstance(value, torch.Tensor):
                return f"{check.name} is {type(value).__name__}, not a tensor"
            if value.dtype not in check.dtypes:
                return f"{check.name} dtype {value.dtype} not admitted"
            if value.get_device() != self.device_index or (on_cpu and not value.is_cpu):
                return f"{check.name} on {value.device}, the candidate on {self.device}"
            if grad and value.requires_grad:
                return f"{check.name} requires grad (only the forward was verified)"
            shape = value.shape
            if len(shape) != check.ndim:
                return f"{check.name} has {len(shape)} dims, the contract {check.ndim}"
            for axis, size in check.literal_axes:
                if shape[axis] != size:
                    return f"{check.name} axis {axis} is {shape[axis]}, the contract {size}"
            for axis, slot in check.dim_axes:
                size = shape[axis]
                bound = sizes[slot]
                if bound is None:
                    dim = self.bounds[slot]
                    if size < dim.lo or size > dim.hi or size % dim.multiple_of:
                        return f"{check.name} axis {axis} = {size} outside {dim.text()}"
                    sizes[slot] = size
                elif size != bound:
                    name = self.bounds[slot].name
                    return f"{check.name} axis {axis} = {size}, but {name} = {bound} elsewhere"
            if value.is_contiguous():
                needs: frozenset[Layout] | None = frozenset()
            else:
                needs = layout_needs(shape, value.stride())
                if needs is None:
                    return f"{check.name} has overlapping strides {value.stride()}"
            if not needs <= check.layouts:
                missing = sorted(lay.value for lay in needs - check.layouts)
                return f"{check.name} layout needs {missing}, not admitted"
            if value.data_ptr() & ALIGNMENT_MASK and not check.misaligned_ok:
                return f"{check.name} is not 16-byte aligned and 'offset' is not admitted"
        for position, name, expected in self.scalars:
            if not same_scalar(args[position], expected):
                return f"{name} = {args[position]!r}, the contract fixes {expected!r}"
        if self.check_aliasing:
            overlap = self._aliased(args)
            if overlap is not None:
                return overlap
        for position, what, value_check in self.value_checks:
            failed = value_check(args[position])
            if failed is not None:
                return f"{what}: {failed}"
        return None

    def _aliased(self, args: Sequence[Any]) -> str | None:
        """The first two inputs whose byte ranges overlap where aliasing is not admitted."""
        spans = []
        for check in self.tensors:
            value = args[check.position]
            start = value.data_ptr()
            spans.append((check, start, start + span_bytes(value)))
        for i, (first, start_a, end_a) in enumerate(spans):
            for second, start_b, end_b in spans[i + 1 :]:
                admitted = first.may_alias and second.may_alias
                if not admitted and start_a < end_b and start_b < end_a:
                    return f"{first.name} and {second.name} share memory (aliasing not admitted)"
        return None


def span_bytes(value: torch.Tensor) -> int:
    """Bytes from a view's first element to just past its last (0 for an empty one)."""
    if value.numel() == 0:
        return 0
    extent = sum((size - 1) * step for size, step in zip(value.shape, value.stride()))
    return (extent + 1) * value.element_size()


def same_scalar(given: Any, expected: Any) -> bool:
    """Whether a runtime scalar is the contract's (JSON turned its tuples into lists)."""
    if isinstance(given, list | tuple) and isinstance(expected, list | tuple):
        return len(given) == len(expected) and all(map(same_scalar, given, expected))
    if isinstance(given, bool) or isinstance(expected, bool):
        return type(given) is type(expected) and given == expected
    return bool(given == expected)


def _finite(value: torch.Tensor) -> str | None:
    return "holds NaN or Inf" if bool(nonfinite(value).any()) else None


def _within(low: float | None, high: float | None) -> ValueCheck:
    def check(value: torch.Tensor) -> str | None:
        if value.numel() == 0:
            return None
        smallest, largest = value.min().item(), value.max().item()
        if low is not None and not smallest >= low:
            return f"holds {smallest}, below {low}"
        if high is not None and not largest <= high:
            return f"holds {largest}, above {high}"
        return None

    return check


def _sorted_last(value: torch.Tensor) -> str | None:
    if value.dim() == 0 or value.shape[-1] < 2:
        return None
    ordered = bool((value[..., 1:] >= value[..., :-1]).all())
    return None if ordered else "not sorted along the last dim"
