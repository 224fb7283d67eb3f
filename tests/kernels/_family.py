"""How each member's tests (gdn, delta_rule, GLA, KDA, Mamba-2) run its chunked kernels against
its float64 recurrence, written once so that every member is held to its bounds the same way.

A member's test file keeps what is its own: its inputs (make_inputs), its oracle and per-step
loop, its cases and tolerances, and the calling convention of its function. The helpers here
take a member's inputs as a list whose last element is the initial state and, for the
gradients, a name per input (its gradient is reported as "d" + name).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
import torch

from ._measure import TF32_FLOOR, rel_err, rounding_bound

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

Pairs = dict[str, tuple[torch.Tensor, torch.Tensor]]
Call = Callable[[Callable, list[torch.Tensor]], tuple[torch.Tensor, torch.Tensor | None]]


def gpu_only(test: Callable) -> Callable:
    """A GPU-only test: marked ``gpu`` (``-m gpu`` selects it; the project conftest skips it
    without CUDA) and skipped where CUDA is absent."""
    needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
    return pytest.mark.gpu(needs_cuda(test))


def case_id(case: Sequence) -> str:
    """Test id of a small case (B, H, K, V, T, initial_state, output_final_state)."""
    return "B{}H{}K{}V{}T{}-h0{:d}-ht{:d}".format(*case)


def state_last_call(use_h0: bool, final: bool, scale: float | None = None) -> Call:
    """The call of a q, k, v member (gdn, delta_rule, GLA, KDA; chunked or naive) on a list of
    inputs ending with the initial state, which is passed only when ``use_h0``."""

    def call(fn: Callable, args: list[torch.Tensor]):
        return fn(
            *args[:-1],
            scale=scale,
            initial_state=args[-1] if use_h0 else None,
            output_final_state=final,
        )

    return call


def run_both(
    chunk: Callable,
    naive: Callable,
    inputs: Sequence[torch.Tensor],
    names: Sequence[str],
    call: Call,
    *,
    final: bool,
    unused: Sequence[str] = (),
    out_like: int = 2,
    out_name: str = "o",
    seed: int = 1,
) -> Pairs:
    """Forward and backward of ``chunk`` and of the float64 ``naive`` oracle on the same
    values (``call(fn, leaves)`` runs either); returns {name: (ours, reference)} for the
    output, the final state (when ``final``) and the gradient of every input but those named
    in ``unused`` (inputs not passed: they must get no gradient). The output must have the
    dtype and shape of ``inputs[out_like]``; the final state is fp32 of the initial state's
    shape; every gradient has its input's dtype and shape. The loss is <o, do> (+ <S_T, dht>)
    with do, dht drawn from ``seed``."""
    like, h0 = inputs[out_like], inputs[-1]
    gen = torch.Generator(device=like.device).manual_seed(seed)
    ours = [x.detach().clone().requires_grad_() for x in inputs]
    refs = [x.detach().double().requires_grad_() for x in inputs]
    o, ht = call(chunk, ours)
    ro, rht = call(naive, refs)
    assert o.dtype == like.dtype and o.shape == like.shape
    do = torch.randn(o.shape, generator=gen, device=like.device).to(o.dtype)
    loss, ref_loss = (o.float() * do).sum(), (ro * do.double()).sum()
    pairs = {out_name: (o, ro)}
    if final:
        assert ht.dtype == torch.float32 and ht.shape == h0.shape
        dht = torch.randn(ht.shape, generator=gen, device=like.device)
        loss, ref_loss = loss + (ht * dht).sum(), ref_loss + (rht * dht.double()).sum()
        pairs["ht"] = (ht, rht)
    else:
        assert ht is None
    loss.backward()
    ref_loss.backward()
    for name, x, r in zip(names, ours, refs, strict=True):
        if name in unused:
            assert x.grad is None
            continue
        assert x.grad.dtype == x.dtype and x.grad.shape == x.shape
        pairs["d" + name] = (x.grad, r.grad)
    return pairs


def run_qkv_member(
    chunk: Callable,
    naive: Callable,
    names: Sequence[str],
    inputs: Sequence[torch.Tensor],
    use_h0: bool,
    final: bool,
    scale: float | None = None,
    seed: int = 1,
) -> Pairs:
    """run_both for a q, k, v member (gdn, delta_rule, GLA, KDA): o is v's dtype and shape,
    the initial state (``inputs[-1]``, named "h0") is passed only when ``use_h0``."""
    return run_both(
        chunk,
        naive,
        inputs,
        names,
        state_last_call(use_h0, final, scale),
        final=final,
        unused=() if use_h0 else ("h0",),
        seed=seed,
    )


def assert_within(pairs: Pairs, tol: float, label: str | None = None) -> None:
    """Every relative error (rel_err) of ``pairs`` at most ``tol``; with a ``label``, the
    errors are printed first (the GPU tests report them)."""
    errors = {name: rel_err(x, r) for name, (x, r) in pairs.items()}
    if label is not None:
        print(label, {n: f"{e:.2e}" for n, e in errors.items()})
    bad = {name: e for name, e in errors.items() if not e <= tol}
    assert not bad, f"relative errors above {tol}: {bad} (all: {errors})"


def assert_within_rounding(pairs: Pairs, label: str, **bound: torch.dtype | None) -> None:
    """Every relative error within its own rounding_bound (``bound``: its keyword arguments),
    the errors printed first."""
    errors = {name: rel_err(x, r) for name, (x, r) in pairs.items()}
    bounds = {name: rounding_bound(x, r, **bound) for name, (x, r) in pairs.items()}
    print(label, {n: f"{e:.2e}" for n, e in errors.items()})
    bad = {name: (e, bounds[name]) for name, e in errors.items() if not e <= bounds[name]}
    assert not bad, f"(relative error, bound) over the bound: {bad} (all: {errors})"


def half_ulp_tolerance(dtype: torch.dtype, fp32_tol: float) -> float:
    """Half an ulp of a 16-bit output dtype plus the fp32 tolerance: 16-bit inputs run the
    fp32 kernels on fp32 copies (kernels/_precision.py) and torch rounds o and the gradients
    to nearest once. (Before, the kernels stored 16-bit results themselves, which the
    interpreter truncates: up to 2^-7 relative, and TF32 dots added 2^-10; the tolerance was
    one ulp plus 2^-10.)"""
    return torch.finfo(dtype).eps / 2 + fp32_tol


def assert_f64_close(a: torch.Tensor, b: torch.Tensor) -> None:
    """Two float64 evaluations of one recurrence agree to rounding (1e-12)."""
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def assert_naive_matches_loop(
    naive: Callable, loop: Callable, inputs: Sequence[torch.Tensor], scale: float = 0.7
) -> tuple[torch.Tensor, torch.Tensor]:
    """The oracle, in float64, equals the member's per-step matrix loop
    ``loop(*inputs[:-1], scale, h0)`` on o and the final state; returns the oracle's."""
    o, ht = naive(*inputs[:-1], scale=scale, initial_state=inputs[-1], output_final_state=True)
    o_loop, ht_loop = loop(*inputs[:-1], scale, inputs[-1])
    assert o.dtype == torch.float64
    assert_f64_close(o, o_loop)
    assert_f64_close(ht, ht_loop)
    return o, ht


def assert_naive_gradcheck(naive: Callable, inputs: Sequence[torch.Tensor]) -> None:
    """torch.autograd.gradcheck of the oracle in all its inputs, the initial state last."""

    def fn(*xs):
        return naive(*xs[:-1], initial_state=xs[-1], output_final_state=True)

    assert torch.autograd.gradcheck(fn, inputs)


def uniform(gen: torch.Generator, lo: float, hi: float, *shape: int) -> torch.Tensor:
    """Uniform in [lo, hi) on DEVICE, drawn from ``gen``."""
    return lo + (hi - lo) * torch.rand(*shape, generator=gen, device=DEVICE)


def assert_as_accurate_as_fp32_recurrence(
    chunk: Callable,
    naive: Callable,
    inputs: Sequence[torch.Tensor],
    grad_names: Sequence[str] | None = None,
    grad_tol: float | None = None,
) -> None:
    """Strong decays: ``chunk``'s output within 4x the error (max |x - ref|) of the fp32
    step-by-step recurrence, both against the float64 oracle. With ``grad_names``, also
    backward of the output's sum: output and gradients finite, each gradient within
    ``grad_tol`` (rel_err) of the oracle's (named in the message)."""
    if grad_names is None:
        ours, _ = chunk(*inputs)
        ref, _ = naive(*(x.double() for x in inputs))
    else:
        xs = [x.clone().requires_grad_() for x in inputs]
        ours, _ = chunk(*xs)
        ours.sum().backward()
        refs = [x.double().requires_grad_() for x in inputs]
        ref, _ = naive(*refs)
        ref.sum().backward()
    honest, _ = naive(*inputs, compute_dtype=torch.float32)
    if grad_names is not None:
        assert torch.isfinite(ours).all() and all(torch.isfinite(x.grad).all() for x in xs)
    ours_err = (ours.double() - ref).abs().max().item()
    honest_err = (honest.double() - ref).abs().max().item()
    assert ours_err <= 4 * honest_err, (ours_err, honest_err)
    if grad_names is not None:
        for name, x, r in zip(grad_names, xs, refs):
            assert rel_err(x.grad, r.grad) <= grad_tol, name


def assert_only_fp32_outputs_break(
    ratios: Sequence[tuple[float, float]], names: Sequence[str], fp32_outputs: Sequence[str]
) -> None:
    """emulated_tf32_ratios' verdict: the fp32 copies inside the ensemble bound everywhere;
    the emulated TF32 path far outside it (over TF32_FLOOR) on ``fp32_outputs`` and inside it
    on every other output."""
    named = dict(zip(names, ratios, strict=True))
    for name, (copies, tf32) in named.items():
        assert copies <= 1.0, (name, copies)
        if name in fp32_outputs:
            assert tf32 > TF32_FLOOR, (name, tf32)
        else:
            assert tf32 <= 1.0, (name, tf32)


def assert_bitwise_deterministic(
    fn: Callable,
    inputs: Sequence[torch.Tensor],
    names: Sequence[str],
    runs: int,
    out_like: int = 2,
) -> None:
    """``runs`` forward and backward runs of ``fn(*inputs[:-1], initial_state=inputs[-1],
    output_final_state=True)`` with fresh allocations each time: the output, the final state
    and every gradient bitwise identical (``names``: o's, the state's and each input's, for
    the message). do is bf16 of ``inputs[out_like]``'s shape, dht fp32 of the state's."""
    do = torch.randn(*inputs[out_like].shape, device="cuda").bfloat16()
    dht = torch.randn_like(inputs[-1])
    first = None
    for _ in range(runs):
        xs = [x.detach().clone().requires_grad_() for x in inputs]
        o, ht = fn(*xs[:-1], initial_state=xs[-1], output_final_state=True)
        ((o.float() * do).sum() + (ht * dht).sum()).backward()
        result = [o, ht] + [x.grad for x in xs]
        if first is None:
            first = [t.clone() for t in result]
            continue
        for name, a, b in zip(names, first, result):
            assert torch.equal(a, b), f"{name} differs between runs"
