"""The judge's class masks and EXC-02's draws, rewritten for large tensors, keep their values.

Each is compared with a plain per-element definition on small tensors holding every class,
and the seeded draws are pinned by digests taken from the code before issue 19.
"""

from __future__ import annotations

import hashlib
import math

import pytest
import torch

from kernelgate.gates.exc02_subnormal import class_determined, subnormal_values
from kernelgate.oracle.compare import FloatClass, ValueClass, float_classes, value_classes


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def _every_class(dtype: torch.dtype) -> torch.Tensor:
    """Seeded subnormals, near-tiny values, signed zeros and normals, plus NaN and +-Inf."""
    values = subnormal_values((7, 300), dtype, 5, (0.3, 0.3, 0.2, 0.2)).double()
    values[0, :4] = torch.tensor([math.nan, math.inf, -math.inf, -0.0])
    return values


@pytest.mark.parametrize("dtype", DTYPES)
def test_float_classes_equal_the_per_element_definition(dtype: torch.dtype) -> None:
    values = _every_class(dtype)
    tiny = float(torch.finfo(dtype).tiny)

    def one(x: float) -> FloatClass:
        if math.isnan(x):
            return FloatClass.NAN
        if math.isinf(x):
            return FloatClass.INF
        if x == 0:
            return FloatClass.ZERO
        return FloatClass.SUBNORMAL if abs(x) < tiny else FloatClass.NORMAL

    rounded = values.to(dtype).double().reshape(-1).tolist()
    got = float_classes(values, dtype).reshape(-1).tolist()
    assert got == [int(one(x)) for x in rounded]
    assert set(got) == {int(c) for c in FloatClass}  # every class was there to be told apart


def test_value_classes_equal_the_per_element_definition() -> None:
    values = _every_class(torch.float32)
    names = {math.inf: ValueClass.POS_INF, -math.inf: ValueClass.NEG_INF}
    want = [
        int(ValueClass.NAN if math.isnan(x) else names.get(x, ValueClass.FINITE))
        for x in values.reshape(-1).tolist()
    ]
    assert value_classes(values).reshape(-1).tolist() == want
    assert value_classes(torch.arange(5)).tolist() == [0] * 5  # integers are finite


@pytest.mark.parametrize(
    ("dtype", "draw", "determined"),
    [
        (torch.float32, "0283de6b0fa35b21", "f6b2a1eb88844724"),
        (torch.float16, "42324318cf22d5f3", "3b71ed71de763906"),
        (torch.bfloat16, "629ebd6ad304a862", "aa41ca26bf416e76"),
    ],
)
def test_subnormal_draws_and_determined_classes_are_pinned(
    dtype: torch.dtype, draw: str, determined: str
) -> None:
    # Digests from before issue 19 (commit 1845ffb): the four candidate magnitudes were
    # stacked and indexed then, selected now; class_determined wrote |ref| - width twice.
    assert _digest(subnormal_values((7, 300), dtype, 5, (0.3, 0.3, 0.2, 0.2))) == draw
    values = _every_class(dtype)
    g = torch.Generator().manual_seed(1)
    admissible = torch.rand(values.shape, generator=g, dtype=torch.float64)
    admissible *= float(torch.finfo(dtype).tiny)
    admissible[1, ::3] = 0
    assert _digest(class_determined(values, admissible, dtype)) == determined
