"""Gated DeltaNet: chunked Triton kernels against the float64 step-by-step recurrence.

Without CUDA the kernels run under the Triton interpreter (TRITON_INTERPRET=1, fp32 only:
the interpreter's bf16 tl.dot is wrong). With CUDA the same small-shape tests run compiled,
and the ``gpu`` tests add bf16 at the benchmark shape and bitwise determinism.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    # Must be set before the kernels are defined; the project conftest does the same.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernelgate.kernels.gdn import (
    chunk_gated_delta_rule,
    naive_recurrent_gated_delta_rule,
)

from ..conftest import load_benchmark
from . import _family as family
from ._family import DEVICE

GRAD_NAMES = ("q", "k", "v", "g", "beta", "h0")


def make_inputs(batch, seq_len, heads, dim_k, dim_v, dtype=torch.float32, seed=0, device=DEVICE):
    """Inputs in the regime Gated DeltaNet is used in: unit-norm keys, beta in (0, 1),
    log-decays from logsigmoid. q, k, v, beta in ``dtype``; g and the state in fp32."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device)

    q = randn(batch, seq_len, heads, dim_k).to(dtype)
    k = F.normalize(randn(batch, seq_len, heads, dim_k), dim=-1).to(dtype)
    v = randn(batch, seq_len, heads, dim_v).to(dtype)
    g = F.logsigmoid(randn(batch, seq_len, heads))
    beta = torch.rand(batch, seq_len, heads, generator=gen, device=device).to(dtype)
    h0 = randn(batch, heads, dim_k, dim_v)
    return q, k, v, g, beta, h0


def run_both(inputs, use_h0, final, scale=None, seed=1):
    """Forward and backward of ours and of the float64 oracle on the same values; returns
    {name: (ours, reference)} for o, the final state and every gradient."""
    return family.run_qkv_member(
        chunk_gated_delta_rule,
        naive_recurrent_gated_delta_rule,
        GRAD_NAMES,
        inputs,
        use_h0,
        final,
        scale,
        seed,
    )


# --------------------------------------------------------------------------- the oracle itself


def per_step_loop(q, k, v, g, beta, scale, h0):
    """The recurrence written once more, one (b, h) and one step at a time with matrices."""
    batch, seq_len, heads, _ = q.shape
    o = torch.zeros(*q.shape[:3], v.shape[-1], dtype=torch.float64)
    final = torch.zeros_like(h0)
    for b in range(batch):
        for h in range(heads):
            state = h0[b, h].clone()
            for t in range(seq_len):
                state = torch.exp(g[b, t, h]) * state
                u = beta[b, t, h] * (v[b, t, h] - state.T @ k[b, t, h])
                state = state + torch.outer(k[b, t, h], u)
                o[b, t, h] = state.T @ (scale * q[b, t, h])
            final[b, h] = state
    return o, final


def test_naive_matches_per_step_loop():
    inputs = [x.double().cpu() for x in make_inputs(2, 9, 2, 5, 3, device="cpu")]
    family.assert_naive_matches_loop(naive_recurrent_gated_delta_rule, per_step_loop, inputs)


def test_naive_gradcheck():
    inputs = [x.double().cpu().requires_grad_() for x in make_inputs(1, 5, 2, 3, 2, device="cpu")]
    family.assert_naive_gradcheck(naive_recurrent_gated_delta_rule, inputs)


# --------------------------------------------------------------------------- fp32, small shapes

FP32_TOL = 1e-5
SMALL_CASES = [
    # (B, H, K, V, T, initial_state, output_final_state)
    (1, 1, 16, 16, 1, False, False),
    (1, 1, 16, 16, 1, True, True),
    (2, 2, 16, 32, 17, False, True),
    (2, 2, 32, 16, 17, True, False),
    (1, 2, 32, 32, 64, False, False),
    (2, 1, 16, 16, 64, True, True),
    (2, 2, 32, 32, 100, True, True),
    (1, 2, 16, 32, 100, False, False),
    (1, 1, 16, 16, 129, True, True),  # two full chunks and a one-step tail
    (1, 1, 20, 24, 70, True, True),  # head dims that are not powers of two
]


@pytest.mark.parametrize("case", SMALL_CASES, ids=family.case_id)
def test_chunk_fp32_matches_float64_oracle(case):
    batch, heads, dim_k, dim_v, seq_len, use_h0, final = case
    pairs = run_both(make_inputs(batch, seq_len, heads, dim_k, dim_v, seed=seq_len), use_h0, final)
    family.assert_within(pairs, FP32_TOL)


def test_chunk_explicit_scale_and_zero_gate():
    """g = 0 is plain DeltaNet; an explicit scale must be honoured."""
    q, k, v, g, beta, h0 = make_inputs(1, 40, 2, 16, 16, seed=7)
    pairs = run_both((q, k, v, torch.zeros_like(g), beta, h0), True, True, scale=0.3)
    family.assert_within(pairs, FP32_TOL)


def test_chunk_rejects_bad_shapes():
    q, k, v, g, beta, h0 = make_inputs(1, 4, 1, 16, 16)
    with pytest.raises(ValueError):
        chunk_gated_delta_rule(q, k, v, g[..., None], beta)
    with pytest.raises(ValueError):
        chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0[:, :, :8])


def test_chunk_strong_decays_as_accurate_as_fp32_recurrence():
    """CMP-01's ``large`` case: q, v ~ 1e4, small keys, log-decays uniform in [-20, 0], so the
    cumulative gate of one chunk reaches ~ -600. Decay factors built from fp32 cumulative sums
    lost ~|G| * 2^-24 in every exponent and made o 15-60x less accurate than the fp32
    step-by-step recurrence; with fp64 cumulative gates the two agree."""
    gen = torch.Generator(device=DEVICE).manual_seed(11)
    batch, seq_len, heads, dim = 2, 130, 2, 32
    q = 1e4 * torch.randn(batch, seq_len, heads, dim, generator=gen, device=DEVICE)
    k = family.uniform(gen, -1 / 16, 1 / 16, batch, seq_len, heads, dim)
    v = 1e4 * torch.randn(batch, seq_len, heads, dim, generator=gen, device=DEVICE)
    g = family.uniform(gen, -20.0, 0.0, batch, seq_len, heads)
    beta = family.uniform(gen, 0.0, 1.0, batch, seq_len, heads)
    family.assert_as_accurate_as_fp32_recurrence(
        chunk_gated_delta_rule, naive_recurrent_gated_delta_rule, (q, k, v, g, beta)
    )


def test_chunk_bf16_runs_the_fp32_kernels_and_rounds_once():
    """bf16 inputs are computed as fp32 copies (_precision.SIXTEEN_BIT_COMPUTE = "fp32"): o and
    the bf16 gradients are the fp32 kernels' results on the same values rounded once to bf16,
    and the fp32 outputs (the final state, dg, dh0) are those results bit for bit. Before,
    the kernels ran TF32 dots on their fp32 intermediates for bf16 inputs, which left dg and
    dh0 60-160x outside the bf16 backward contract's bound on the H200 (the interpreter's
    exact dots could not show it; benchmarks/gdn_bwd_dot_precision.py emulates them)."""
    inputs = make_inputs(2, 70, 2, 16, 24, dtype=torch.bfloat16, seed=5)
    gen = torch.Generator(device=DEVICE).manual_seed(6)
    do = torch.randn(2, 70, 2, 24, generator=gen, device=DEVICE).bfloat16()
    dht = torch.randn(2, 2, 16, 24, generator=gen, device=DEVICE)
    results = []
    for cast in (lambda x: x, lambda x: x.float()):
        xs = [cast(x).detach().requires_grad_() for x in inputs]
        o, ht = chunk_gated_delta_rule(*xs[:5], initial_state=xs[5], output_final_state=True)
        grads = torch.autograd.grad((o, ht), xs, (cast(do), dht))
        results.append((o, ht, *grads))
    bf16, fp32 = results
    for name, ours, ref in zip(("o", "ht", *GRAD_NAMES), bf16, fp32, strict=True):
        assert ours.dtype == (torch.float32 if name in ("ht", "g", "h0") else torch.bfloat16)
        assert torch.equal(ours, ref.to(ours.dtype)), name


def test_every_member_reads_the_one_sixteen_bit_setting(monkeypatch):
    """gdn, delta_rule, GLA, KDA and Mamba-2 all pass their inputs through
    kernels/_precision.compute_inputs at every call (delta_rule used to call gdn's launchers
    directly and bypass it): an unknown SIXTEEN_BIT_COMPUTE is refused by each of them."""
    from kernelgate.kernels import _precision
    from kernelgate.kernels.delta_rule import chunk_delta_rule
    from kernelgate.kernels.gla import chunk_gla
    from kernelgate.kernels.kda import chunk_kda
    from kernelgate.kernels.mamba2 import chunk_ssd

    q, k, v, g, beta, _ = make_inputs(1, 4, 1, 16, 16, dtype=torch.bfloat16)
    g_k = g[..., None].expand_as(q).contiguous()
    b_n = k[:, :, :1]  # [b, T, G=1, N]
    calls = {
        "gdn": lambda: chunk_gated_delta_rule(q, k, v, g, beta),
        "delta_rule": lambda: chunk_delta_rule(q, k, v, beta),
        "gla": lambda: chunk_gla(q, k, v, g_k),
        "kda": lambda: chunk_kda(q, k, v, g_k, beta),
        "mamba2": lambda: chunk_ssd(v, beta.float(), -torch.ones(1), b_n, b_n),
    }
    for name, call in calls.items():  # the calls themselves are valid
        assert call()[0].dtype == torch.bfloat16, name
    monkeypatch.setattr(_precision, "SIXTEEN_BIT_COMPUTE", "bf16")
    refused = []
    for name, call in calls.items():
        try:
            call()
        except ValueError as exc:
            if "SIXTEEN_BIT_COMPUTE" in str(exc):
                refused.append(name)
    assert refused == list(calls)


# Kernels whose offline sm_90 compile must stay within 255 registers and no spill stores:
# all of them (benchmarks/gdn_bwd_resources.py covers more head sizes and Triton 3.6).
SPILL_FREE_KERNELS = (
    "_wy_fwd_kernel",
    "_wy_apply_fwd_kernel",
    "_state_fwd_kernel",
    "_output_fwd_kernel",
    "_state_bwd_kernel",
    "_dscores_bwd_kernel",
    "_qk_bwd_kernel",
    "_wy_da_bwd_kernel",
    "_wy_dkv_bwd_kernel",
    "_gate_bwd_kernel",
)


def _misaligned(x: torch.Tensor) -> torch.Tensor:
    """The same values in a contiguous view whose data pointer is 4-byte aligned only (a
    storage offset, as CMP-02 makes)."""
    base = torch.empty(x.numel() + 1, dtype=x.dtype, device=x.device)
    view = base[1:].view(x.shape)
    view.copy_(x)
    assert view.is_contiguous() and view.data_ptr() % 16
    return view


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU mode only: offline compile")
def test_kernels_compile_for_sm90_without_spills():
    """RES-02's CPU path for our kernels at K = V = 128 (bf16 and fp32) and at the example's
    K = V = 32, T = 130 (also with inputs at a storage offset, as CMP-02 passes them: they must
    launch the same, aligned specialization): record the interpreted launches, compile them
    offline for sm_90 in a process without the interpreter (kernelgate.sandbox.resources),
    check the figures. bf16 inputs run as fp32 copies (_precision.SIXTEEN_BIT_COMPUTE), so they
    launch the fp32 specializations and nothing of their own."""
    from triton.runtime.interpreter import InterpretedFunction

    from kernelgate.sandbox.resources import LaunchRecorder

    recorder = LaunchRecorder()
    original_run = InterpretedFunction.run
    recorder.install(interpreter=True)
    try:
        # batch 1 everywhere: the batch is only in the launch grid, never in a kernel's
        # arguments or constexprs, so it changes no compiled specialization (batch 2 at the
        # example's T = 130 records the same launches), and the interpreter runs half the
        # programs
        for batch, seq_len, heads, dim, dtype, misaligned in (
            (1, 128, 2, 128, torch.bfloat16, False),
            (1, 128, 2, 128, torch.float32, False),
            (1, 130, 2, 32, torch.float32, False),
            (1, 130, 2, 32, torch.float32, True),
        ):
            inputs = make_inputs(batch, seq_len, heads, dim, dim, dtype=dtype)
            xs = [x.detach().clone().requires_grad_() for x in inputs]
            args = [_misaligned(x) for x in xs] if misaligned else xs
            o, _ = chunk_gated_delta_rule(*args[:5], initial_state=args[5])
            o.float().sum().backward()
        records = [
            r
            for r in recorder.drain()
            if r.get("backend") == "triton-interpreter" and r["name"] in SPILL_FREE_KERNELS
        ]
    finally:
        InterpretedFunction.run = original_run
    # The misaligned inputs and the bf16 ones launched nothing new: every pointer is 16-byte
    # aligned ("D"), and every dot IEEE fp32.
    assert len(records) == 2 * len(SPILL_FREE_KERNELS)
    assert all(r["constexprs"].get("PREC", "ieee") == "ieee" for r in records)
    for record in records:
        pointers = [n for n, kind in record["signature"].items() if kind.startswith("*")]
        assert all(record["attrs"].get(n) == "D" for n in pointers), record["attrs"]
    candidate = Path(__file__).resolve().parents[2] / "examples" / "gdn" / "candidate.py"
    started = time.monotonic()
    # a failed compile exits with the compiler's error (SystemExit: the test fails with it)
    _, results = load_benchmark("_offline_compile").compile_offline(
        records, candidate, None, timeout=600
    )
    print(f"offline compile of {len(records)} kernels: {time.monotonic() - started:.1f} s")
    bad = []
    for record, result in zip(records, results, strict=True):
        assert "error" not in result, result
        assert result["spill_source"].startswith("ptxas -v spill stores"), result
        if result["registers"] > 255 or result["spill_bytes"] != 0:
            bad.append(
                (
                    result["name"],
                    record["constexprs"].get("K"),
                    record["constexprs"].get("PREC"),
                    result["registers"],
                    result["spill_bytes"],
                )
            )
    message = f"(kernel, K, precision, registers, spill bytes) over budget: {bad}"
    assert not bad, message


# --------------------------------------------------------------------------- GPU only

BF16_TOL = 3.3e-3
BENCH_SHAPE = dict(batch=2, seq_len=4096, heads=16, dim_k=128, dim_v=128)


@family.gpu_only
def test_chunk_bf16_benchmark_shape_against_float64_oracle():
    """bf16 at B=2, T=4096, H=16, K=V=128; the oracle runs in float64 on the GPU from the
    same bf16-rounded values."""
    pairs = run_both(make_inputs(**BENCH_SHAPE, dtype=torch.bfloat16, seed=42), True, True)
    family.assert_within(pairs, BF16_TOL, label="bf16 relative errors:")


@family.gpu_only
def test_chunk_bitwise_deterministic():
    """Ten runs, fresh allocations each time: outputs and every gradient bitwise identical."""
    inputs = make_inputs(**BENCH_SHAPE, dtype=torch.bfloat16, seed=3)
    names = ("o", "ht", *GRAD_NAMES)
    family.assert_bitwise_deterministic(chunk_gated_delta_rule, inputs, names, runs=10)
