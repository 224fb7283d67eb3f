"""Zeros whose sign the reference leaves open, and every sign that follows from them.

IEEE 754 fixes the sign of every zero that arithmetic makes (``-0 * 2`` is -0, ``-0 + +0`` is
+0) except where an operation *selects* one of several values that compare equal, and
+0 == -0: ``max(-0, +0)``, ``relu(-0)``, ``clamp(-0, min=0)``, ``where(c, -0, +0)``, the max
of a row that holds both zeros. There the implementation chooses, and honest ones differ:
PyTorch's CPU ``relu(-0.0)`` is -0.0 and its CUDA relu +0.0, IEEE 754-2019 ``maximum`` gives
+0 and ``minimum`` -0, CPU ``torch.maximum`` returns its first argument, a Triton
``where(x > 0, x, 0)`` gives +0. So the sign of such an *open* zero is no part of the
reference's contract, and neither is any sign that follows from it downstream
(``relu(a) * b + c`` is +-0 when c is -0, ``1 / relu(x)`` is +-inf).

How they are found: the float64 reference runs again under ``ZeroSignMode``, which lets every
op of ``SELECTIONS`` run as usual and then overwrites the zeros it returned where zeros of
both signs were among the values it chose from, with one fill: +0 (variant "+"), -0
(variant "-") or NaN (the taint run). Per output position, rounded to the output dtype:

- the oracle and the two variants differ in class (``exp(1 / relu(x))`` is +inf or 0): the
  class is open too, and the position has nothing to judge;
- they agree in class but not in sign: the sign is open, the class is still judged;
- the taint run is NaN where the oracle is a zero or an infinity: an open zero reaches the
  position, so its sign is open. The uniform variants alone miss mixed choices: IEEE's
  ``maximum(-0, +0)`` is +0 and its ``minimum`` -0, so ``max(a, 0) * min(b, 0)`` can be -0
  where both uniform variants give +0; NaN follows every data path an open zero takes,
  except through ops that drop NaN (fmax, nan_to_num, comparisons), where the variants are
  what is left. A nonzero finite result is never opened by the taint alone: a zero added to
  it leaves its sign alone.

Cost: one float64 forward under the mode (a few mask operations per selection op); when it
meets no open zero, nothing else. Otherwise two more (the "-" variant and the taint run).
Callers ask only where a candidate or an honest run already differs from the oracle.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kernelgate.oracle.compare import FloatClass, float_classes, rounding_device, sign_bits
from kernelgate.oracle.modes import JudgeDispatchMode


@dataclass(frozen=True)
class Call:
    """One intercepted op call: the overload, its arguments, and them bound by schema name."""

    func: torch._ops.OpOverload
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    bound: dict[str, Any]

    @classmethod
    def of(cls, func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Call:
        bound: dict[str, Any] = {}
        for index, argument in enumerate(func._schema.arguments):
            if not argument.kwarg_only and index < len(args):
                bound[argument.name] = args[index]
            elif argument.name in kwargs:
                bound[argument.name] = kwargs[argument.name]
            elif argument.has_default_value():
                bound[argument.name] = argument.default_value
        return cls(func, args, kwargs, bound)

    @property
    def device(self) -> torch.device:
        for value in self.bound.values():
            if isinstance(value, torch.Tensor):
                return value.device
        return torch.device("cpu")


def zero_indicators(values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Where ``values`` holds +0, and where -0."""
    zero, negative = values == 0, torch.signbit(values)
    return zero & ~negative, zero & negative


class Selection(ABC):
    """How one op chooses its results among values, and so which zero results are open."""

    def prepare(self, call: Call) -> Any:
        """What ``open`` needs from the inputs, read before the op runs (it may be in-place).
        The default: the zero indicators of a floating ``self``, or None."""
        source = call.bound.get("self")
        if isinstance(source, torch.Tensor) and source.is_floating_point():
            return zero_indicators(source)
        return None

    @abstractmethod
    def open(self, prepared: Any, call: Call, values: torch.Tensor) -> torch.Tensor:
        """Where a zero among the results ``values`` was chosen among zeros of both signs
        (broadcastable to ``values``; the caller keeps only the positions that are zero)."""


@dataclass(frozen=True)
class Choice(Selection):
    """Elementwise: each result is the value of one of a pair of arguments (a schema name, or
    a constant such as relu's +0). Open where both of a pair are zeros of opposite signs:
    ``where(c, -0, +0)`` is open whatever ``c`` is, since both results are the same value."""

    pairs: tuple[tuple[str | float, str | float], ...]

    def prepare(self, call: Call) -> torch.Tensor | None:
        mask = None
        for left, right in self.pairs:
            a, b = self._operand(call, left), self._operand(call, right)
            if a is None or b is None:
                continue
            differ = (a == 0) & (b == 0) & (torch.signbit(a) != torch.signbit(b))
            mask = differ if mask is None else mask | differ
        return mask

    def open(self, prepared: Any, call: Call, values: torch.Tensor) -> torch.Tensor:
        if prepared is None:
            return torch.zeros((), dtype=torch.bool, device=values.device)
        return prepared

    @staticmethod
    def _operand(call: Call, name: str | float) -> torch.Tensor | None:
        value = call.bound.get(name) if isinstance(name, str) else name
        if isinstance(value, torch.Tensor):
            return value.to(call.device) if value.is_floating_point() else None
        if isinstance(value, int | float) and not isinstance(value, bool):
            return torch.tensor(float(value), dtype=torch.float64, device=call.device)
        return None  # an absent bound (clamp's None), a complex number, a bool


@dataclass(frozen=True)
class Extreme(Selection):
    """Each result is an element of the slice the op reduces or orders along its ``dim``
    argument (every dim when it has none, or an empty list): max, min, median, kth value,
    sort, top-k. Open where that slice holds zeros of both signs."""

    keeps_dim: bool = False  # the results keep the reduced dim (sort, topk)

    def open(self, prepared: Any, call: Call, values: torch.Tensor) -> torch.Tensor:
        if prepared is None:
            return torch.zeros((), dtype=torch.bool, device=values.device)
        positive, negative = prepared
        dim = call.bound.get("dim")
        dims = None if dim is None or dim == [] else ((dim,) if isinstance(dim, int) else dim)
        keepdim = self.keeps_dim or bool(call.bound.get("keepdim", False))

        def holds(indicator: torch.Tensor) -> torch.Tensor:
            if indicator.dim() == 0:
                return indicator
            every = tuple(range(indicator.dim())) if dims is None else tuple(dims)
            return torch.any(indicator, dim=every, keepdim=keepdim)

        return holds(positive) & holds(negative)


@dataclass(frozen=True)
class Running(Selection):
    """cummax / cummin: the result at i is an element of the prefix up to i along ``dim``.
    Open where that prefix holds zeros of both signs."""

    def open(self, prepared: Any, call: Call, values: torch.Tensor) -> torch.Tensor:
        if prepared is None:
            return torch.zeros((), dtype=torch.bool, device=values.device)
        dim = call.bound["dim"]
        positive, negative = (torch.cumsum(i.to(torch.int32), dim) > 0 for i in prepared)
        return positive & negative


@dataclass(frozen=True)
class Window(Selection):
    """Max pooling: each result is an element of its window. The same pooling applied to the
    zero indicators (1.0 where the input holds a +0, resp. a -0) says which windows hold
    each sign, with the op's own kernel size, stride, padding, dilation and rounding."""

    def open(self, prepared: Any, call: Call, values: torch.Tensor) -> torch.Tensor:
        if prepared is None:
            return torch.zeros((), dtype=torch.bool, device=values.device)
        kwargs = {k: v for k, v in call.kwargs.items() if k != "out"}

        def holds(indicator: torch.Tensor) -> torch.Tensor:
            pooled = call.func(indicator.to(values.dtype), *call.args[1:], **kwargs)
            return (pooled[0] if isinstance(pooled, tuple | list) else pooled) > 0

        positive, negative = prepared
        return holds(positive) & holds(negative)


_SELF_OR_OTHER = Choice((("self", "other"),))
_CLAMP = Choice((("self", "min"), ("self", "max")))
_EXTREME = Extreme()
_ORDERED = Extreme(keeps_dim=True)
_WINDOW = Window()

# aten ops (by overload packet, or packet.overload where one packet holds both kinds) as a
# TorchDispatchMode sees them, CPU and CUDA alike: CompositeImplicit ops arrive decomposed
# (F.relu6 and F.hardtanh as hardtanh, torch.clip as clamp, torch.max(a, b) as maximum,
# F.max_pool1d as max_pool2d_with_indices, adaptive_max_pool1d as adaptive_max_pool2d).
SELECTIONS: dict[str, Selection] = {
    # elementwise: one of two values
    "relu": Choice((("self", 0.0),)),  # max(x, +0): open at x = -0 only
    "relu_": Choice((("self", 0.0),)),
    "clamp": _CLAMP,
    "clamp_": _CLAMP,
    "clip": _CLAMP,
    "clip_": _CLAMP,
    "clamp_min": Choice((("self", "min"),)),
    "clamp_min_": Choice((("self", "min"),)),
    "clamp_max": Choice((("self", "max"),)),
    "clamp_max_": Choice((("self", "max"),)),
    "hardtanh": Choice((("self", "min_val"), ("self", "max_val"))),
    "hardtanh_": Choice((("self", "min_val"), ("self", "max_val"))),
    "maximum": _SELF_OR_OTHER,
    "minimum": _SELF_OR_OTHER,
    "fmax": _SELF_OR_OTHER,
    "fmin": _SELF_OR_OTHER,
    "max.other": _SELF_OR_OTHER,
    "max.out": _SELF_OR_OTHER,
    "min.other": _SELF_OR_OTHER,
    "min.out": _SELF_OR_OTHER,
    "where": _SELF_OR_OTHER,  # where(condition) (indices) has no floating result
    "threshold": Choice((("self", "value"),)),  # where(x > threshold, x, value)
    "threshold_": Choice((("self", "value"),)),
    "masked_fill": Choice((("self", "value"),)),
    "masked_fill_": Choice((("self", "value"),)),
    # an element of a slice: reductions and order statistics (values; indices are integers)
    "max": _EXTREME,
    "min": _EXTREME,
    "amax": _EXTREME,
    "amin": _EXTREME,
    "aminmax": _EXTREME,
    "median": _EXTREME,
    "nanmedian": _EXTREME,
    "kthvalue": _EXTREME,
    "mode": _EXTREME,
    "sort": _ORDERED,
    "topk": _ORDERED,
    "cummax": Running(),
    "cummin": Running(),
    # an element of a window
    "max_pool1d": _WINDOW,
    "max_pool2d": _WINDOW,
    "max_pool3d": _WINDOW,
    "max_pool1d_with_indices": _WINDOW,
    "max_pool2d_with_indices": _WINDOW,
    "max_pool3d_with_indices": _WINDOW,
    "adaptive_max_pool1d": _WINDOW,
    "adaptive_max_pool2d": _WINDOW,
    "adaptive_max_pool3d": _WINDOW,
}


def selection_of(func: torch._ops.OpOverload) -> Selection | None:
    packet = func._overloadpacket.__name__
    return SELECTIONS.get(f"{packet}.{func._overloadname}", SELECTIONS.get(packet))


def _floating_tensors(out: Any) -> list[torch.Tensor]:
    items = out if isinstance(out, tuple | list) else (out,)
    return [t for t in items if isinstance(t, torch.Tensor) and t.is_floating_point()]


class ZeroSignMode(JudgeDispatchMode):
    """Runs every op as usual, then overwrites the open zeros among the results of each
    selection op (``SELECTIONS``) with ``fill`` (+0.0, -0.0 or NaN), counting them."""

    def __init__(self, fill: float) -> None:
        super().__init__()
        self.fill = fill
        self.opened = 0

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        selection = selection_of(func)
        if selection is None:
            return func(*args, **kwargs)
        call = Call.of(func, args, kwargs)
        prepared = selection.prepare(call)  # before the op: it may overwrite its input
        out = func(*args, **kwargs)
        for values in _floating_tensors(out):
            chosen = torch.broadcast_to(selection.open(prepared, call, values), values.shape)
            chosen = chosen & (values == 0)
            opened = int(chosen.count_nonzero())
            if opened:
                self.opened += opened
                values.masked_fill_(chosen, self.fill)
        return out


def with_open_zeros(run: Callable[[], list[Any]], fill: float) -> tuple[list[Any], int]:
    """``run()`` (an evaluation of the reference) with every open zero made ``fill``, and how
    many zeros were open."""
    mode = ZeroSignMode(fill)
    with mode:
        outputs = run()
    return outputs, mode.opened


@dataclass(frozen=True)
class OpenSigns:
    """Per position of one output (rounded to its dtype): what follows from open zeros."""

    sign_open: torch.Tensor  # bool: the class is fixed, either sign is honest
    class_open: torch.Tensor  # bool: the class itself follows from an open zero


@dataclass
class _Folding:
    """One output's masks, folded in one run at a time: only one run's outputs are alive at
    once (a float64 copy of a KernelBench-sized output is gigabytes).

    Folded where the oracle's result lies (its device, where the judge keeps it: see
    ``fp64.results_device``) when that device rounds float64 to the output dtype bit for
    bit as the CPU does (``compare.rounds_like_cpu``), else on the CPU: the classes and
    signs are those of the rounded values, so they must not depend on where they are
    rounded. Each run's outputs are moved there."""

    dtype: torch.dtype
    device: torch.device
    want_nan: torch.Tensor
    classes: torch.Tensor
    signs: torch.Tensor
    class_open: torch.Tensor
    sign_differs: torch.Tensor

    @classmethod
    def start(cls, want: torch.Tensor, dtype: torch.dtype) -> _Folding:
        device = rounding_device(want, dtype)
        want = want.detach().to(device)
        classes = float_classes(want, dtype)
        nothing = torch.zeros(classes.shape, dtype=torch.bool, device=device)
        return cls(
            dtype=dtype,
            device=device,
            want_nan=torch.isnan(want),
            classes=classes,
            signs=sign_bits(want, dtype),
            class_open=nothing,
            sign_differs=nothing.clone(),
        )

    def variant(self, values: torch.Tensor) -> None:
        """A uniform variant: where its class or its sign differs from the oracle's."""
        values = values.detach().to(self.device)
        self.class_open |= float_classes(values, self.dtype) != self.classes
        self.sign_differs |= sign_bits(values, self.dtype) != self.signs

    def taint(self, values: torch.Tensor) -> None:
        """The taint run: an open zero reaches where it is NaN and the oracle is not; the
        sign of a zero or an infinity there may be that zero's."""
        reached = torch.isnan(values.detach().to(self.device)) & ~self.want_nan
        signed_by_a_zero = (self.classes == FloatClass.ZERO) | (self.classes == FloatClass.INF)
        self.sign_differs |= reached & signed_by_a_zero

    def result(self) -> OpenSigns:
        sign_open = self.sign_differs & ~self.class_open & (self.classes != FloatClass.NAN)
        return OpenSigns(sign_open=sign_open, class_open=self.class_open)


def open_signs(
    run: Callable[[], list[Any]], expected: list[Any], dtypes: list[torch.dtype | None]
) -> list[OpenSigns | None]:
    """Per output of ``run`` (the float64 reference; ``expected`` is its plain result), where
    open zeros leave the sign or the class undefined in ``dtypes`` (the outputs' dtypes).
    None for an output that is no floating tensor, and for every output when the reference
    meets no open zero at all (then only the first variant was run)."""
    plus, opened = with_open_zeros(run, 0.0)
    if not opened:
        return [None] * len(expected)
    folds = [
        _Folding.start(want, dtype)
        if isinstance(want, torch.Tensor) and dtype is not None and dtype.is_floating_point
        else None
        for want, dtype in zip(expected, dtypes, strict=True)
    ]

    def fold(outputs: list[Any], how: Callable[[_Folding, torch.Tensor], None]) -> None:
        for folding, values in zip(folds, outputs, strict=True):
            if folding is not None:
                how(folding, values)

    fold(plus, _Folding.variant)
    del plus
    fold(with_open_zeros(run, -0.0)[0], _Folding.variant)
    try:
        tainted = with_open_zeros(run, math.nan)[0]
    except RuntimeError:  # an op that refuses NaN: the uniform variants are what is left
        tainted = None
    if tainted is not None:
        fold(tainted, _Folding.taint)
    return [None if folding is None else folding.result() for folding in folds]
