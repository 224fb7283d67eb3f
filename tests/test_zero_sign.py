"""Zeros whose sign the reference leaves open (``oracle/zero_sign.py``) and EXC-02's rule.

The op table's open masks are checked op by op with a visible fill (0.5 where a zero was
open), the variants with +0 and -0 fills, the per-position rule (``OpenSigns``) on hand-made
programs, and a hypothesis property: every honest convention for choosing among +0 and -0
(the CPU's, CUDA's, IEEE 754-2019's, a different one per element) is accepted, and a sign
flipped where the reference fixes it is not.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from kernelgate.contract.spec import FlushPolicy
from kernelgate.gates.exc02_subnormal import ExpectedClasses
from kernelgate.oracle.zero_sign import SELECTIONS, open_signs, with_open_zeros

N0 = -0.0
SHOWN = 0.5  # a visible fill: the open positions of a result are where it is 0.5


def _t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def _open(run: Callable[[], torch.Tensor]) -> list[bool]:
    """Per element of ``run()``'s (first) result, whether it was an open zero."""
    out, _ = with_open_zeros(lambda: [run()], SHOWN)
    result = out[0]
    if isinstance(result, tuple | list):
        result = result[0]
    return (result == SHOWN).flatten().tolist()


X = _t(N0, 0.0, -1.0, 2.0, N0)  # a -0, a +0, a negative, a positive, a -0
Y = _t(0.0, N0, N0, 0.0, N0)
GRID = _t(N0, 0.0, -1.0, N0, N0, -2.0, 0.0, 5.0, N0).reshape(3, 3)  # rows: both zeros / -0 only


def _relu_inplace() -> torch.Tensor:
    return torch.nn.ReLU(inplace=True)(X.clone())


def _clamp_inplace() -> torch.Tensor:
    return X.clone().clamp_(min=0.0)


# (what, run, open positions): elementwise ops are open where their two candidates are zeros
# of opposite signs; slice ops where the result is zero and the slice holds both zeros.
ELEMENTWISE = [
    ("relu", lambda: torch.relu(X), [1, 0, 0, 0, 1]),
    ("relu_ (in place)", _relu_inplace, [1, 0, 0, 0, 1]),
    ("relu6 (hardtanh)", lambda: F.relu6(X), [1, 0, 0, 0, 1]),
    ("hardtanh(0, 1)", lambda: F.hardtanh(X, 0.0, 1.0), [1, 0, 0, 0, 1]),
    ("hardtanh(-1, 1)", lambda: F.hardtanh(X), [0, 0, 0, 0, 0]),
    ("clamp(min=0)", lambda: torch.clamp(X, min=0), [1, 0, 0, 0, 1]),
    ("clamp_ (in place)", _clamp_inplace, [1, 0, 0, 0, 1]),
    ("clamp(max=-0.0)", lambda: torch.clamp(X, max=N0), [0, 1, 0, 0, 0]),
    ("clamp(min=Y)", lambda: torch.clamp(X, min=Y), [1, 1, 0, 0, 0]),
    ("clip(0, 1)", lambda: torch.clip(X, 0, 1), [1, 0, 0, 0, 1]),
    ("clamp_min", lambda: torch.clamp_min(X, 0.0), [1, 0, 0, 0, 1]),
    ("clamp_max", lambda: torch.clamp_max(X, 0.0), [1, 0, 0, 0, 1]),
    ("maximum", lambda: torch.maximum(X, Y), [1, 1, 0, 0, 0]),
    ("minimum", lambda: torch.minimum(X, Y), [1, 1, 0, 0, 0]),
    ("max(a, b)", lambda: torch.max(X, Y), [1, 1, 0, 0, 0]),
    ("min(a, b)", lambda: torch.min(X, Y), [1, 1, 0, 0, 0]),
    ("fmax", lambda: torch.fmax(X, Y), [1, 1, 0, 0, 0]),
    ("fmin", lambda: torch.fmin(X, Y), [1, 1, 0, 0, 0]),
    (
        "maximum broadcast",
        lambda: torch.maximum(X[:, None], Y[None, :2]),
        [1, 0, 0, 1, 0, 0, 0, 0, 1, 0],
    ),
    ("where(x > 0, x, 0)", lambda: torch.where(X > 0, X, 0.0), [1, 0, 0, 0, 1]),
    ("where(c, x, y)", lambda: torch.where(X < 1, X, Y), [1, 1, 0, 0, 0]),
    ("threshold", lambda: F.threshold(X, 0.0, 0.0), [1, 0, 0, 0, 1]),
    ("masked_fill", lambda: X.masked_fill(X <= 0, 0.0), [1, 0, 0, 0, 1]),
    ("leaky_relu (no selection)", lambda: F.leaky_relu(X), [0, 0, 0, 0, 0]),
]
SLICES = [
    ("amax(dim=1)", lambda: GRID.amax(1), [1, 0, 0]),
    ("amin(dim=1)", lambda: (-GRID).amin(1), [1, 0, 0]),
    ("max()", lambda: _t(N0, 0.0, -1.0).max(), [1]),
    ("max() of -0 only", lambda: _t(N0, N0, -1.0).max(), [0]),
    ("max(dim=1)", lambda: GRID.max(dim=1), [1, 0, 0]),
    ("min(dim=1, keepdim)", lambda: (-GRID).min(dim=1, keepdim=True), [1, 0, 0]),
    ("aminmax", lambda: torch.stack(GRID.aminmax(dim=1)), [0, 0, 1, 1, 0, 0]),
    ("median(dim=1)", lambda: GRID.median(dim=1), [1, 0, 1]),
    ("nanmedian()", lambda: _t(N0, 0.0, 1.0).nanmedian(), [1]),
    ("kthvalue(2)", lambda: GRID.kthvalue(2, dim=1), [1, 0, 1]),
    ("mode", lambda: _t(N0, 0.0, 0.0, 1.0).mode(), [1]),
    ("sort", lambda: torch.sort(GRID, dim=1), [0, 1, 1, 0, 0, 0, 1, 1, 0]),
    ("topk(2)", lambda: torch.topk(GRID, 2, dim=1), [1, 1, 0, 0, 0, 1]),
    ("cummax", lambda: GRID.cummax(1), [0, 1, 1, 0, 0, 0, 0, 0, 0]),
    ("cummin", lambda: (-GRID).cummin(1), [0, 1, 1, 0, 0, 0, 0, 0, 0]),
    ("max_pool1d(2, 1)", lambda: F.max_pool1d(GRID[None], 2, 1), [1, 0, 0, 0, 0, 0]),
    ("max_pool2d", lambda: F.max_pool2d(GRID[None, None], (1, 2), 1), [1, 0, 0, 0, 0, 0]),
    ("max_pool2d padded", lambda: F.max_pool2d(GRID[None, None], 2, 2, padding=1), [0, 0, 1, 0]),
    ("max_pool3d", lambda: F.max_pool3d(GRID[None, None, None], (1, 1, 2), 1), [1] + [0] * 5),
    ("adaptive_max_pool1d", lambda: F.adaptive_max_pool1d(GRID[None], 1), [1, 0, 0]),
    ("adaptive_max_pool2d", lambda: F.adaptive_max_pool2d(GRID[None, None], (3, 1)), [1, 0, 0]),
]


@pytest.mark.parametrize(
    ("what", "run", "expected"), ELEMENTWISE + SLICES, ids=[c[0] for c in ELEMENTWISE + SLICES]
)
def test_open_mask_of_each_selection_op(what: str, run: Callable, expected: list[int]) -> None:
    assert _open(run) == [bool(e) for e in expected], what


@pytest.mark.parametrize(
    ("what", "run", "expected"), ELEMENTWISE + SLICES, ids=[c[0] for c in ELEMENTWISE + SLICES]
)
def test_variants_give_each_open_zero_both_signs(what: str, run: Callable, expected: list[int]):
    """Variant "+" makes every open zero +0 and "-" makes it -0; nothing else changes."""
    plain = run()
    plain = (plain[0] if isinstance(plain, tuple | list) else plain).flatten()
    opened = torch.tensor([bool(e) for e in expected])
    for fill, negative in ((0.0, False), (N0, True)):
        out, count = with_open_zeros(lambda: [run()], fill)
        got = out[0][0] if isinstance(out[0], tuple | list) else out[0]
        got = got.flatten()
        assert count == int(opened.sum())
        assert (got[opened] == 0).all() and (torch.signbit(got[opened]) == negative).all()
        assert torch.equal(torch.signbit(got[~opened]), torch.signbit(plain[~opened]))
        assert torch.equal(got[~opened], plain[~opened])


class _Seen(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.ops.append(func._overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_public_selection_functions_reach_a_table_entry(device: str) -> None:
    """What a dispatch mode sees is the decomposed aten op (F.relu6 is hardtanh, torch.clip is
    clamp, F.max_pool1d is max_pool2d_with_indices): each public function reaches the table."""
    x = torch.zeros(2, 1, 4, 4, dtype=torch.float64, device=device)
    calls = {
        "relu6": lambda: F.relu6(x),
        "clip": lambda: torch.clip(x, 0, 1),
        "clamp(min=0)": lambda: torch.clamp(x, min=0),
        "max(a, b)": lambda: torch.max(x, x),
        "max_pool1d": lambda: F.max_pool1d(x[0], 2),
        "max_pool2d": lambda: F.max_pool2d(x, 2),
        "adaptive_max_pool1d": lambda: F.adaptive_max_pool1d(x[0], 2),
        "nn.ReLU(inplace)": lambda: torch.nn.ReLU(inplace=True)(x),
        "F.threshold": lambda: F.threshold(x, 0.0, 0.0),
        "msort": lambda: torch.msort(x),
        "amax": lambda: torch.amax(x, dim=(1, 2)),
    }
    for what, call in calls.items():
        seen = _Seen()
        with seen:
            call()
        assert any(op in SELECTIONS for op in seen.ops), (what, seen.ops)


def test_every_table_entry_names_an_aten_op() -> None:
    for key in SELECTIONS:
        packet, _, overload = key.partition(".")
        op = getattr(torch.ops.aten, packet)
        assert not overload or overload in op.overloads(), key


def _signs(run: Callable[[], list], dtype: torch.dtype = torch.float32):
    expected = run()
    return open_signs(run, expected, [dtype] * len(expected))


def test_a_sign_that_follows_from_an_open_zero_is_open_and_a_fixed_one_is_not() -> None:
    a = _t(N0, 0.0, N0, 1.0, N0)
    b = _t(1.0, -1.0, 1.0, N0, 1.0)
    c = _t(N0, N0, 3.0, N0, 0.0)
    opened = _signs(lambda: [torch.relu(a) * b + c])[0]
    # relu(-0) * 1 + -0 is +-0 (open); +0 * -1 + -0 and 1 * -0 + -0 are -0 (fixed); 3.0 is 3.0;
    # relu(-0) * 1 + +0 is +0 either way, but an open zero reaches it (taint: opened too)
    assert opened.sign_open.tolist() == [True, False, False, False, True]
    assert not opened.class_open.any()


def test_an_infinity_from_an_open_zero_keeps_its_class_and_opens_its_sign() -> None:
    x = _t(N0, 0.0, 2.0)
    infinite = _signs(lambda: [1.0 / torch.relu(x)])[0]
    assert infinite.sign_open.tolist() == [True, False, False]
    normal = _signs(lambda: [torch.tanh(1.0 / torch.relu(x))])[0]  # +-1: normal, sign open
    assert normal.sign_open.tolist() == [True, False, False]
    assert not normal.class_open.any()


def test_a_class_that_follows_from_an_open_zero_is_open() -> None:
    x = _t(N0, 0.0, 2.0)
    opened = _signs(lambda: [torch.exp(-1.0 / torch.relu(x))])[0]  # 0 or +inf
    assert opened.class_open.tolist() == [True, False, False]
    assert not opened.sign_open.any()


def test_mixed_choices_are_covered_by_the_taint() -> None:
    """IEEE 754-2019: maximum(-0, +0) = +0, minimum(-0, +0) = -0. Their product is -0 where
    both uniform variants (all +0, all -0) give +0: only the taint run sees that it is open."""
    a, b = _t(N0), _t(N0)
    opened = _signs(lambda: [torch.maximum(a, _t(0.0)) * torch.minimum(b, _t(0.0))])[0]
    assert opened.sign_open.tolist() == [True]


def test_nothing_open_costs_one_run_and_gives_none() -> None:
    runs = []

    def run() -> list:
        runs.append(1)
        return [_t(N0, 1.0) * 2.0, torch.tensor([3])]

    assert open_signs(run, run(), [torch.float32, None]) == [None, None]
    assert len(runs) == 2  # the plain one and the "+" variant


def test_a_reference_that_refuses_nan_still_gets_the_uniform_variants() -> None:
    x = _t(N0, 1.0)

    def run() -> list:
        y = torch.relu(x)
        if torch.isnan(y).any():
            raise RuntimeError("refuses NaN")
        return [y]

    opened = _signs(run)[0]
    assert opened.sign_open.tolist() == [True, False]


# -- the property: every honest convention is accepted, a fixed sign flipped is not ----------

# zeros of both signs, most of the time (1e-40: an fp32 subnormal)
ZERO_SIGN_VALUES = [0.0, N0] * 3 + [1.0, -1.0, 2.5, -2.5, 1e-40, -1e-40]


def _tie(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Where a selection between ``a`` and ``b`` chooses among zeros of both signs."""
    return (a == 0) & (b == 0) & (torch.signbit(a) != torch.signbit(b))


def _maximum(a: torch.Tensor, b: torch.Tensor, zero: Callable) -> torch.Tensor:
    return torch.where(_tie(a, b), zero(a, b, largest=True), torch.maximum(a, b))


def _minimum(a: torch.Tensor, b: torch.Tensor, zero: Callable) -> torch.Tensor:
    return torch.where(_tie(a, b), zero(a, b, largest=False), torch.minimum(a, b))


def _ieee(a: torch.Tensor, b: torch.Tensor, *, largest: bool) -> torch.Tensor:
    """IEEE 754-2019 maximum / minimum on two zeros: +0 > -0."""
    negative = (
        torch.signbit(a) & torch.signbit(b) if largest else torch.signbit(a) | torch.signbit(b)
    )
    return torch.where(negative, N0, 0.0).double()


def _first(a: torch.Tensor, b: torch.Tensor, *, largest: bool) -> torch.Tensor:
    return a  # the CPU's maximum / minimum: the first argument


def _plus(a: torch.Tensor, b: torch.Tensor, *, largest: bool) -> torch.Tensor:
    return torch.zeros_like(a)  # CUDA's relu, a Triton where(x > 0, x, 0)


def _per_element(seed: int) -> Callable:
    def choose(a: torch.Tensor, b: torch.Tensor, *, largest: bool) -> torch.Tensor:
        g = torch.Generator().manual_seed(seed + int(largest))
        pick = torch.rand(torch.broadcast_shapes(a.shape, b.shape), generator=g) < 0.5
        return torch.where(pick, a, b)

    return choose


PROGRAMS = {
    "relu(a) * b + c": lambda a, b, c, z: _maximum(a, torch.zeros_like(a), z) * b + c,
    "max(a, 0) * min(b, 0) + c": lambda a, b, c, z: (
        _maximum(a, torch.zeros_like(a), z) * _minimum(b, torch.zeros_like(b), z) + c
    ),
    "1 / relu(a) + c": lambda a, b, c, z: 1.0 / _maximum(a, torch.zeros_like(a), z) + c,
    "max(a, b) * c": lambda a, b, c, z: _maximum(a, b, z) * c,
}
CONVENTIONS = {"ieee": _ieee, "cpu-first": _first, "cuda-plus": _plus}


def _tensor(draw: st.DrawFn, n: int) -> torch.Tensor:
    values = draw(st.lists(st.sampled_from(ZERO_SIGN_VALUES), min_size=n, max_size=n))
    return torch.tensor(values, dtype=torch.float64)


@st.composite
def _problems(draw: st.DrawFn) -> tuple[str, torch.Tensor, torch.Tensor, torch.Tensor]:
    n = draw(st.integers(1, 24))
    return (
        draw(st.sampled_from(sorted(PROGRAMS))),
        _tensor(draw, n),
        _tensor(draw, n),
        _tensor(draw, n),
    )


@settings(max_examples=60, deadline=None)
@given(
    problem=_problems(),
    convention=st.sampled_from([*CONVENTIONS, "per-element"]),
    seed=st.integers(0, 99),
)
def test_every_honest_convention_is_accepted_and_a_fixed_sign_flip_is_not(
    problem: tuple[str, torch.Tensor, torch.Tensor, torch.Tensor], convention: str, seed: int
) -> None:
    name, a, b, c = problem
    program = PROGRAMS[name]

    def reference() -> list:  # the reference in torch's own ops, as the oracle runs it
        relu = torch.relu(a)
        if name == "relu(a) * b + c":
            return [relu * b + c]
        if name == "max(a, 0) * min(b, 0) + c":
            return [torch.clamp(a, min=0) * torch.clamp(b, max=0) + c]
        if name == "1 / relu(a) + c":
            return [1.0 / relu + c]
        return [torch.maximum(a, b) * c]

    want = reference()[0]
    opened = open_signs(reference, [want], [torch.float32])[0]
    expected = ExpectedClasses.of(want, torch.float32)
    if opened is not None:
        expected = expected.with_open_signs(opened)
        judged = ~opened.class_open
    else:
        judged = torch.ones(want.shape, dtype=torch.bool)
    choose = CONVENTIONS.get(convention) or _per_element(seed)
    honest = program(a, b, c, choose).float()
    accepted = expected.accepted(honest, FlushPolicy.PRESERVE)
    assert accepted[judged].all(), (name, convention, a, b, c, honest, want)
    # a zero whose sign the reference fixes, flipped, is rejected
    fixed_zeros = judged & (want == 0)
    if opened is not None:
        fixed_zeros &= ~opened.sign_open
    flipped = torch.where(fixed_zeros, -want, want).float()
    assert not expected.accepted(flipped, FlushPolicy.PRESERVE)[fixed_zeros].any()


def test_nan_fill_is_the_taint() -> None:
    out, count = with_open_zeros(lambda: [torch.relu(_t(N0, 1.0)) * 2.0], math.nan)
    assert count == 1 and torch.isnan(out[0][0]) and out[0][1] == 2.0
