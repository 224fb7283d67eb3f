"""GLA: chunked Triton kernels against the float64 step-by-step recurrence.

Without CUDA the kernels run under the Triton interpreter (TRITON_INTERPRET=1, fp32 only:
the interpreter's bf16 tl.dot is wrong). With CUDA the same small-shape tests run compiled,
and the ``gpu`` tests add bf16 at the benchmark shape and bitwise determinism.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    # Must be set before the kernels are defined; the project conftest does the same.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernelgate.kernels.gla import chunk_gla, naive_recurrent_gla

from . import _family as family
from ._family import DEVICE
from ._measure import (
    assert_16bit_is_the_fp32_path_rounded_once,
    cotangents,
    emulated_tf32_ratios,
)

GRAD_NAMES = ("q", "k", "v", "g", "h0")


def make_inputs(batch, seq_len, heads, dim_k, dim_v, dtype=torch.float32, seed=0, device=DEVICE):
    """Inputs in the regime GLA is used in: per-channel log-decays from logsigmoid, keys scaled
    by K^-1/2. q, k, v in ``dtype``; g and the state in fp32."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen, device=device)

    q = randn(batch, seq_len, heads, dim_k).to(dtype)
    k = (randn(batch, seq_len, heads, dim_k) * dim_k**-0.5).to(dtype)
    v = randn(batch, seq_len, heads, dim_v).to(dtype)
    g = F.logsigmoid(randn(batch, seq_len, heads, dim_k))
    h0 = randn(batch, heads, dim_k, dim_v)
    return q, k, v, g, h0


def run_both(inputs, use_h0, final, scale=None, seed=1):
    """Forward and backward of ours and of the float64 oracle on the same values; returns
    {name: (ours, reference)} for o, the final state and every gradient."""
    return family.run_qkv_member(
        chunk_gla, naive_recurrent_gla, GRAD_NAMES, inputs, use_h0, final, scale, seed
    )


# --------------------------------------------------------------------------- the oracle itself


def per_step_loop(q, k, v, g, scale, h0):
    """The recurrence written once more, one (b, h) and one step at a time with matrices."""
    batch, seq_len, heads, _ = q.shape
    o = torch.zeros(*q.shape[:3], v.shape[-1], dtype=torch.float64)
    final = torch.zeros_like(h0)
    for b in range(batch):
        for h in range(heads):
            state = h0[b, h].clone()
            for t in range(seq_len):
                decay = torch.diag(torch.exp(g[b, t, h]))
                state = decay @ state + torch.outer(k[b, t, h], v[b, t, h])
                o[b, t, h] = state.T @ (scale * q[b, t, h])
            final[b, h] = state
    return o, final


def test_naive_matches_per_step_loop():
    inputs = [x.double().cpu() for x in make_inputs(2, 9, 2, 5, 3, device="cpu")]
    family.assert_naive_matches_loop(naive_recurrent_gla, per_step_loop, inputs)


def test_naive_gradcheck():
    inputs = [x.double().cpu().requires_grad_() for x in make_inputs(1, 5, 2, 3, 2, device="cpu")]
    family.assert_naive_gradcheck(naive_recurrent_gla, inputs)


# --------------------------------------------------------------------------- fp32, small shapes

FP32_TOL = 1e-5
SMALL_CASES = [
    # (B, H, K, V, T, initial_state, output_final_state); the chunk is 16 steps
    (1, 1, 16, 16, 1, True, True),
    (1, 1, 16, 16, 16, False, False),
    (2, 2, 20, 24, 37, True, True),  # head dims that are not powers of two, a 5-step tail
    (1, 2, 32, 16, 33, False, True),  # a one-step tail
    (2, 1, 16, 48, 50, True, False),  # two V tiles of the scans
]


@pytest.mark.parametrize("case", SMALL_CASES, ids=family.case_id)
def test_chunk_fp32_matches_float64_oracle(case):
    batch, heads, dim_k, dim_v, seq_len, use_h0, final = case
    pairs = run_both(make_inputs(batch, seq_len, heads, dim_k, dim_v, seed=seq_len), use_h0, final)
    family.assert_within(pairs, FP32_TOL)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_chunk_16bit_inputs(dtype):
    """bf16 / fp16 inputs (g too): o and every gradient in the input's dtype, the final state
    and dh0 in fp32, each within half an output ulp (plus the fp32 tolerance) of the float64
    oracle on the same values."""
    inputs = list(make_inputs(1, 20, 1, 16, 16, dtype=dtype, seed=5))
    inputs[3] = inputs[3].to(dtype)
    pairs = run_both(inputs, True, True)
    assert pairs["ht"][0].dtype == torch.float32 and pairs["dh0"][0].dtype == torch.float32
    assert pairs["o"][0].dtype == dtype and pairs["dg"][0].dtype == dtype
    family.assert_within(pairs, family.half_ulp_tolerance(dtype, FP32_TOL))


def test_chunk_explicit_scale_and_zero_gate():
    """g = 0 is plain linear attention; an explicit scale must be honoured."""
    q, k, v, g, h0 = make_inputs(1, 20, 1, 16, 16, seed=7)
    pairs = run_both((q, k, v, torch.zeros_like(g), h0), True, True, scale=0.3)
    family.assert_within(pairs, FP32_TOL)


def test_chunk_rejects_bad_shapes():
    q, k, v, g, h0 = make_inputs(1, 4, 1, 16, 16)
    with pytest.raises(ValueError, match="expected g"):
        chunk_gla(q, k, v, g[..., 0])
    with pytest.raises(ValueError, match="initial_state"):
        chunk_gla(q, k, v, g, initial_state=h0[:, :, :8])
    with pytest.raises(ValueError, match="v \\[B,T,H,V\\]"):
        chunk_gla(q, k, v[:, :3], g)


def test_chunk_strong_decays_stay_finite_and_as_accurate_as_fp32_recurrence():
    """The contract's extreme: q, v ~ 1e4 and per-channel log-decays uniform in [-20, 0], so a
    chunk's cumulative decay reaches ~ -320 in every channel. A factorised exp(G_i) exp(-G_j)
    would overflow fp32 here; ours forms every factor from a difference and stays within 4x
    the error of the fp32 step-by-step recurrence, gradients included."""
    gen = torch.Generator(device=DEVICE).manual_seed(11)
    batch, seq_len, heads, dim = 1, 40, 2, 16
    q = 1e4 * torch.randn(batch, seq_len, heads, dim, generator=gen, device=DEVICE)
    k = family.uniform(gen, -1.0, 1.0, batch, seq_len, heads, dim)
    v = 1e4 * torch.randn(batch, seq_len, heads, dim, generator=gen, device=DEVICE)
    g = family.uniform(gen, -20.0, 0.0, batch, seq_len, heads, dim)
    family.assert_as_accurate_as_fp32_recurrence(
        chunk_gla, naive_recurrent_gla, (q, k, v, g), grad_names=GRAD_NAMES, grad_tol=FP32_TOL
    )


# --------------------------------------------------------------------------- 16-bit inputs


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_chunk_16bit_is_the_fp32_path_rounded_once(dtype):
    """16-bit inputs (g too) are computed as fp32 copies (kernels/_precision.py): o and the
    16-bit gradients are the fp32 path's results on the same values rounded once, the final
    state and dh0 those results bit for bit."""
    q, k, v, g, h0 = make_inputs(2, 40, 2, 16, 24, dtype=dtype, seed=5)
    do, dht = cotangents((2, 40, 2, 24), (2, 2, 16, 24), dtype, seed=6, device=DEVICE)
    assert_16bit_is_the_fp32_path_rounded_once(chunk_gla, (q, k, v, g.to(dtype), h0), do, dht)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU mode: emulates the device's dots")
def test_bf16_tf32_dots_would_break_the_fp32_output_bounds(monkeypatch):
    """Why 16-bit inputs run as fp32 copies: the kernels' own 16-bit path (TF32 dots, whose
    fp32 operands, the states, decayed keys and queries and their gradients, lose 13 mantissa
    bits) leaves the fp32 outputs S_T, dg (of an fp32 g) and dh0 far outside CMP-01's ensemble
    bound of an honest fp32 evaluation (benchmarks/family_dot_precision.py: 86-150x, 27-104x,
    54-104x); the copies stay inside, and the bf16 outputs are inside either way."""
    inputs = make_inputs(1, 70, 2, 32, 32, dtype=torch.bfloat16, seed=0)
    do, dht = cotangents((1, 70, 2, 32), (1, 2, 32, 32), torch.bfloat16, seed=1, device=DEVICE)
    ratios = emulated_tf32_ratios(chunk_gla, naive_recurrent_gla, inputs, do, dht, monkeypatch)
    names = ("o", "ht", "dq", "dk", "dv", "dg", "dh0")
    family.assert_only_fp32_outputs_break(ratios, names, fp32_outputs=("ht", "dg", "dh0"))


# --------------------------------------------------------------------------- GPU only


BENCH_SHAPE = dict(batch=2, seq_len=4096, heads=16, dim_k=128, dim_v=128)


@family.gpu_only
def test_chunk_bf16_benchmark_shape_against_float64_oracle():
    """bf16 at B=2, T=4096, H=16, K=V=128; the oracle runs in float64 on the GPU from the
    same bf16-rounded values. Bound per output: half an ulp of its largest element in its
    dtype plus the TF32 allowance (rounding_bound)."""
    pairs = run_both(make_inputs(**BENCH_SHAPE, dtype=torch.bfloat16, seed=42), True, True)
    family.assert_within_rounding(pairs, "GLA bf16 relative errors:")


@family.gpu_only
def test_chunk_bitwise_deterministic():
    """Ten runs, fresh allocations each time: outputs and every gradient bitwise identical."""
    inputs = make_inputs(**BENCH_SHAPE, dtype=torch.bfloat16, seed=3)
    family.assert_bitwise_deterministic(chunk_gla, inputs, ("o", "ht", *GRAD_NAMES), runs=10)
