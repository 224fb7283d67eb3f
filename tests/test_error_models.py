"""Error models: probabilistic vs worst-case order bounds, magnitude via absolute values,
the elementwise model, and the evidence each records."""

from __future__ import annotations

import math

import pytest
import torch

from kernelgate.contract.library import entry
from kernelgate.contract.match import magnitude
from kernelgate.oracle.error_models import (
    SAFETY,
    assess_elementwise,
    assess_ensemble,
    assess_order,
    assess_with,
    order_coefficient,
    unit_roundoff,
)

U32 = 2.0**-24


def test_order_coefficient_probabilistic_and_worst_case() -> None:
    n = 4096
    assert order_coefficient(n) == pytest.approx(SAFETY.order * SAFETY.order_probabilistic * 64)
    assert order_coefficient(n, worst_case=True) == pytest.approx(
        SAFETY.order * SAFETY.order_worst_case * n
    )
    assert order_coefficient(n, worst_case=True) > order_coefficient(n)


def _row_sum_case(error: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x = torch.randn(4, 1024, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    expected = x.sum(1)
    actual = (expected + error).to(torch.float32)
    return expected, actual, x.abs().sum(1)


def test_worst_case_bound_admits_what_the_probabilistic_one_rejects() -> None:
    expected, _, mag = _row_sum_case(0.0)
    # 500 u M: past c u sqrt(1024) M = 256 u M (c = 2 x 4), inside 2 N u M = 2048 u M.
    actual = (expected + 500 * U32 * mag).to(torch.float32)
    prob = assess_order(expected, actual, {}, magnitude=mag, n=1024)
    worst = assess_order(expected, actual, {}, magnitude=mag, n=1024, worst_case=True)
    assert not prob.passed and worst.passed
    assert prob.params["bound_kind"] == "probabilistic"
    assert worst.params["bound_kind"] == "worst-case"
    assert prob.params["n"] == 1024 and "sqrt(N)" in prob.params["bound"]
    c = SAFETY.order * SAFETY.order_probabilistic * 32
    assert prob.worst_ratio == pytest.approx(500 / c, rel=0.05)


def test_order_bound_scales_with_magnitude_not_with_the_result() -> None:
    # The result cancels to ~0 but the terms are large: the bound follows sum |terms|.
    expected = torch.zeros(3, dtype=torch.float64)
    mag = torch.full((3,), 1e6, dtype=torch.float64)
    actual = torch.full((3,), 1e6 * 10 * U32, dtype=torch.float32)
    assert assess_order(expected, actual, {}, magnitude=mag, n=100).passed
    assert not assess_order(expected, actual, {}, magnitude=expected.abs(), n=100).passed


def test_elementwise_model_is_relative_with_an_optional_scale() -> None:
    expected = torch.tensor([1.0, 1e-3, 4.0], dtype=torch.float64)
    u = unit_roundoff(torch.float32)
    ok = (expected * (1 + 2 * u)).to(torch.float32)
    bad = (expected * (1 + 64 * u)).to(torch.float32)
    assert assess_elementwise(expected, ok, {}).passed
    result = assess_elementwise(expected, bad, {})
    assert not result.passed and result.model == "elementwise"
    assert result.params["units"] == SAFETY.elementwise_units
    assert result.mismatches and result.mismatches[0]["bound"] > 0
    widened = assess_elementwise(expected, bad, {}, scale=expected + 100, scale_name="input-abs")
    assert widened.passed and widened.params["scale"] == "input-abs"


def test_a_nan_where_the_oracle_is_finite_is_named_in_the_reason_text() -> None:
    """An infinite worst ratio explains nothing on its own: the text says how many positions
    changed IEEE class, and an error that is merely too large says nothing of classes."""
    expected = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    nan_twice = torch.tensor([1.0, float("nan"), 3.0, float("nan")])
    honest = {"native-eager": expected.to(torch.float32)}
    result = assess_ensemble(expected, nan_twice, honest)
    assert not result.passed and result.class_mismatches == 2
    assert "inf; 2 position(s) of another IEEE class" in result.worst_text
    too_far = assess_ensemble(expected, (expected * 1.01).to(torch.float32), honest)
    assert not too_far.passed and too_far.class_mismatches == 0
    assert "IEEE class" not in too_far.worst_text


def test_assess_with_dispatches_on_the_model_name() -> None:
    expected, actual, mag = _row_sum_case(0.0)
    honest = {"native-eager": actual}
    assert assess_with("ensemble", {}, expected, actual, honest).model == "ensemble"
    order = assess_with(
        "order", {"magnitude": "abs-linear"}, expected, actual, honest, magnitude=mag, n=1024
    )
    assert order.model == "order" and order.params["magnitude"] == "abs-linear"
    tf32 = assess_with("order", {"tf32": True}, expected, actual, honest, magnitude=mag, n=1024)
    assert tf32.params["accumulate_unit_roundoff"] == 2.0**-11
    with pytest.raises(ValueError, match="unknown error model"):
        assess_with("nope", {}, expected, actual, honest)
    assert assess_ensemble(expected, actual, honest).passed


class MatMul(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (a @ b).reshape(-1)


def test_magnitude_of_matmul_is_abs_a_times_abs_b() -> None:
    g = torch.Generator().manual_seed(1)
    a = torch.randn(3, 5, generator=g, dtype=torch.float64)
    b = torch.randn(5, 2, generator=g, dtype=torch.float64)
    scales, n = magnitude(MatMul(), [a, b], entry("matmul"))
    assert n == 5
    assert torch.allclose(scales[0], (a.abs() @ b.abs()).reshape(-1))


def test_magnitude_of_sum_and_linear() -> None:
    x = -torch.arange(12, dtype=torch.float64).reshape(3, 4)

    class Sum(torch.nn.Module):
        def forward(self, v: torch.Tensor) -> torch.Tensor:
            return v.sum(dim=1)

    scales, n = magnitude(Sum(), [x], entry("sum"))
    assert n == 4 and torch.equal(scales[0], x.abs().sum(1))
    linear = torch.nn.Linear(4, 2).double()
    scales, n = magnitude(linear, [x], entry("linear"))
    want = x.abs() @ linear.weight.abs().T + linear.bias.abs()
    assert n == 4 and torch.allclose(scales[0], want)


def test_lost_term_exceeds_bound_but_honest_rounding_does_not() -> None:
    n = 4096
    x = torch.rand(n, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    exact = x.sum().reshape(1)
    honest = x.to(torch.float32).sum().reshape(1)
    lost = (x.to(torch.float32)[:-1].sum()).reshape(1)
    mag = x.abs().sum().reshape(1)
    assert assess_order(exact, honest, {}, magnitude=mag, n=n).passed
    result = assess_order(exact, lost, {}, magnitude=mag, n=n)
    assert not result.passed and result.worst_ratio > 1
    assert math.isfinite(result.params["max_magnitude"])


def _softmax_model() -> torch.nn.Module:
    class Softmax(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(x, dim=-1)

    return Softmax()


def test_softmax_bound_carries_the_rounding_of_shifted_arguments() -> None:
    """Heavy-tailed rows: one entry near +80, the rest O(1). fp32's rounding of x - max costs
    exp a relative error up to u |x - max| / 2 ~ 40 u, past c(N) u + 8 u = 24 u for rows of
    4; the softmax-arguments magnitude admits that honest error and still rejects bf16."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(4096, 4, generator=g, dtype=torch.float64)
    x[:, 0] = 80.0 + torch.rand(4096, generator=g, dtype=torch.float64)
    x32 = x.float()
    expected = torch.softmax(x32.double(), dim=-1)
    # an honest fp32 softmax whose exp sees the rounded shifted argument (as on a GPU)
    shifted = x32 - x32.amax(-1, keepdim=True)
    honest = torch.exp(shifted.double()).float()
    honest = (honest / honest.sum(-1, keepdim=True)).float()
    mags, n = magnitude(_softmax_model(), [x32.double()], entry("softmax"))
    plain = assess_order(expected, honest, {}, magnitude=expected.abs(), n=n)
    judged = assess_order(expected, honest, {}, magnitude=mags[0], n=n)
    assert n == 4
    assert not plain.passed  # |ref| alone cannot hold an honest heavy-tailed softmax ...
    assert judged.passed, judged.worst_ratio  # ... the argument term can
    downcast = torch.softmax(x32.bfloat16().float(), dim=-1).bfloat16().float()
    assert not assess_order(expected, downcast, {}, magnitude=mags[0], n=n).passed


def test_order_bound_never_below_what_honest_evaluations_reach() -> None:
    """A reference's own fp32 run that loses residues (a sequential GEMM on cancellation
    rows) sets a floor: a candidate as accurate passes, a far lossier one does not."""
    expected, _, mag = _row_sum_case(0.0)
    honest_error = 1000 * U32 * mag  # past the probabilistic model (128 u M)
    honest = {"native-eager": (expected + honest_error).to(torch.float32)}
    same = (expected + honest_error).to(torch.float32)
    lossier = (expected + 100 * honest_error).to(torch.float32)
    assert not assess_order(expected, same, {}, magnitude=mag, n=1024).passed
    judged = assess_order(expected, same, honest, magnitude=mag, n=1024)
    assert judged.passed
    assert judged.params["positions_at_honest_floor"] == expected.numel()
    assert not assess_order(expected, lossier, honest, magnitude=mag, n=1024).passed


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_magnitudes_stay_on_the_device_they_were_computed_on() -> None:
    """No trip to the host and back: the judgement that uses them runs on that device."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(8, 16, generator=g, dtype=torch.float64)
    b = torch.randn(16, 4, generator=g, dtype=torch.float64)
    on_cpu, n = magnitude(MatMul(), [a, b], entry("matmul"))
    on_device, n_device = magnitude(MatMul().cuda(), [a.cuda(), b.cuda()], entry("matmul"))
    assert on_cpu[0].device.type == "cpu" and on_device[0].device.type == "cuda"
    assert n == n_device == 16
    torch.testing.assert_close(on_device[0].cpu(), on_cpu[0], rtol=1e-12, atol=0)
