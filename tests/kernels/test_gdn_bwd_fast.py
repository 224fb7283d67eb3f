"""The register-resident Gated DeltaNet backward (kernels/gdn/chunk_bwd_fast.py, opt-in with
``chunk.BACKWARD = "registers"``) against the float64 step-by-step recurrence's autograd and
against the staged backward.

Without CUDA the kernels run under the Triton interpreter, which computes every dot in fp32
whatever its input precision: these tests check the algorithm (dS and the WY backward held
in registers, the in-program sums over K tiles, the masks of ragged T, K and V), not the
tf32x3 rounding, which needs the device. The offline sm_90 resources are
benchmarks/gdn_bwd_fast_resources.py's job (minutes of compiling, not a test's).
"""

from __future__ import annotations

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernelgate.kernels.gdn import chunk as gdn_chunk
from kernelgate.kernels.gdn import chunk_gated_delta_rule, naive_recurrent_gated_delta_rule

from . import _family as family
from .test_gdn import FP32_TOL, GRAD_NAMES, make_inputs

BACKWARD_CASES = [
    # (B, H, K, V, T, initial_state, output_final_state, forward)
    (1, 2, 32, 32, 200, True, True, "staged"),  # ragged last chunk (200 = 3 * 64 + 8)
    (1, 1, 32, 32, 200, False, False, "registers"),
    (1, 1, 64, 64, 130, True, True, "registers"),  # two K and V tiles of 32
    (1, 1, 64, 64, 100, False, True, "staged"),
    (1, 1, 20, 24, 70, True, True, "staged"),  # head sizes that are not powers of two
    (2, 1, 16, 16, 1, True, False, "registers"),  # one step
    # rows that are not whole 16-byte vectors: column tiles of 16 (chunk.fast_bwd_widths:
    # two ragged tiles at 31, one-element rows at 1); above 32 under the registers forward
    # the whole call runs zero-padded (chunk.registers_padding: 33 -> 36, 1 -> 4)
    (1, 1, 31, 31, 70, True, True, "registers"),
    (1, 2, 31, 32, 130, False, True, "staged"),
    (1, 1, 1, 32, 70, True, False, "registers"),
    (1, 1, 32, 1, 70, True, True, "registers"),
    (1, 1, 33, 33, 70, True, True, "staged"),
    (1, 1, 33, 33, 70, True, True, "registers"),
    (1, 1, 33, 1, 70, True, True, "registers"),
]


def _case_id(case: tuple) -> str:
    return "-".join(str(x) for x in case)


@pytest.mark.parametrize("case", BACKWARD_CASES, ids=_case_id)
def test_registers_backward_matches_float64_oracle(monkeypatch, case):
    """Every gradient (dq, dk, dv, dg, dbeta, dh0) within the fp32 tolerance of the float64
    recurrence's autograd, under either forward."""
    batch, heads, dim_k, dim_v, seq_len, use_h0, final, forward = case
    monkeypatch.setattr(gdn_chunk, "BACKWARD", "registers")
    monkeypatch.setattr(gdn_chunk, "FORWARD", forward)
    inputs = make_inputs(batch, seq_len, heads, dim_k, dim_v, seed=seq_len)
    pairs = family.run_qkv_member(
        chunk_gated_delta_rule, naive_recurrent_gated_delta_rule, GRAD_NAMES, inputs, use_h0, final
    )
    family.assert_within(pairs, FP32_TOL)


# (dims, bound): at 31 x 31 the column tiles of 16 (unaligned head sizes) sum K and V in 16s
# against the staged kernels' 32s; dg, a difference of nearly cancelling sums, then agreed to
# 1.04e-6 (6.1e-7 with tiles of 32), while both paths stay within 4e-7 of the float64 oracle.
AGREEMENT_CASES = [((32, 24), 1e-6), ((31, 31), 2e-6)]


@pytest.mark.parametrize("dims,bound", AGREEMENT_CASES, ids=["32x24", "31x31"])
def test_registers_backward_agrees_with_staged(monkeypatch, dims, bound):
    """The same gradients as the staged backward on the same saved intermediates, to
    rounding (the sums run in another order, so not bitwise), and bitwise reproducible."""
    q, k, v, g, beta, h0 = make_inputs(1, 100, 2, *dims, seed=5)
    saved = gdn_chunk.chunk_gated_delta_rule_fwd(q, k, v, g, beta, 0.3, h0, True)[2]
    gen = torch.Generator().manual_seed(2)
    do = torch.randn(v.shape, generator=gen)
    dht = torch.randn(h0.shape, generator=gen)
    got = {}
    for path in ("staged", "registers", "registers"):
        monkeypatch.setattr(gdn_chunk, "BACKWARD", path)
        grads = gdn_chunk.chunk_gated_delta_rule_bwd(q, k, v, g, beta, 0.3, True, saved, do, dht)
        if path in got:
            for x, y in zip(grads, got[path], strict=True):
                assert torch.equal(x, y)
        got[path] = grads
    for name, x, y in zip(GRAD_NAMES, got["registers"], got["staged"], strict=True):
        assert x.shape == y.shape and x.dtype == y.dtype, name
        assert family.rel_err(x, y) <= bound, (name, family.rel_err(x, y))


def test_delta_rule_follows_the_setting(monkeypatch):
    """chunk_delta_rule runs these launchers at g = 0 (and pads odd head sizes): its
    gradients under the "registers" backward stay within 1e-5 of the float64 oracle."""
    from kernelgate.kernels.delta_rule import chunk_delta_rule, naive_recurrent_delta_rule

    from .test_delta_rule import make_inputs as delta_inputs

    monkeypatch.setattr(gdn_chunk, "BACKWARD", "registers")
    pairs = family.run_qkv_member(
        chunk_delta_rule,
        naive_recurrent_delta_rule,
        ("q", "k", "v", "beta", "h0"),
        delta_inputs(1, 90, 2, 24, 40, seed=4),
        True,
        True,
    )
    family.assert_within(pairs, FP32_TOL)


def test_unaligned_head_sizes_take_narrower_tiles(monkeypatch):
    """K or V not a multiple of 4 caps every column tile at FAST_BWD_UNALIGNED_BLOCK (the
    32-wide tiles spill on sm_90 there); aligned sizes, ragged or not, keep FAST_BWD_BLOCK."""
    monkeypatch.setattr(gdn_chunk, "FAST_BWD_BLOCK", dict.fromkeys(gdn_chunk.FAST_BWD_BLOCK, 64))
    cap = gdn_chunk.FAST_BWD_UNALIGNED_BLOCK
    for dims in ((31, 31), (31, 32), (1, 32), (32, 1), (6, 6)):
        assert all(w == cap for w in gdn_chunk.fast_bwd_widths(*dims).values()), dims
    for dims in ((32, 32), (20, 24), (128, 128)):
        assert gdn_chunk.fast_bwd_widths(*dims) == gdn_chunk.FAST_BWD_BLOCK, dims


def test_registers_forward_pads_odd_head_sizes(monkeypatch):
    """Under the registers forward, K or V not a multiple of 4 runs zero-padded to the next
    multiple once either exceeds REGISTERS_PAD_ABOVE; smaller and aligned sizes, and every
    size under the staged forward, run as they are."""
    monkeypatch.setattr(gdn_chunk, "FORWARD", "registers")
    for dim_k, dim_v, wide in ((33, 33, (36, 36)), (33, 1, (36, 4)), (1, 64, (4, 64))):
        q, _, v, *_ = make_inputs(1, 8, 1, dim_k, dim_v)
        pad = gdn_chunk.registers_padding(q, v)
        assert pad is not None and (pad.rows_wide, pad.cols_wide) == wide, (dim_k, dim_v)
    for dim_k, dim_v in ((31, 31), (1, 32), (20, 24), (36, 100)):
        q, _, v, *_ = make_inputs(1, 8, 1, dim_k, dim_v)
        assert gdn_chunk.registers_padding(q, v) is None, (dim_k, dim_v)
    monkeypatch.setattr(gdn_chunk, "FORWARD", "staged")
    q, _, v, *_ = make_inputs(1, 8, 1, 33, 33)
    assert gdn_chunk.registers_padding(q, v) is None


def test_padded_registers_path_is_bitwise_reproducible(monkeypatch):
    """The zero-padded call (registers forward and backward, K = 33 -> 36, V = 1 -> 4) twice:
    the same bits in o, the final state and every gradient, each of the caller's shape."""
    monkeypatch.setattr(gdn_chunk, "FORWARD", "registers")
    monkeypatch.setattr(gdn_chunk, "BACKWARD", "registers")
    runs = []
    for _ in range(2):
        inputs = [x.detach().requires_grad_() for x in make_inputs(1, 70, 2, 33, 1, seed=3)]
        q, k, v, g, beta, h0 = inputs
        o, ht = chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
        (o.square().sum() + ht.sum()).backward()
        runs.append([o, ht, *(x.grad for x in inputs)])
        for x in inputs:
            assert x.grad.shape == x.shape
    assert runs[0][0].shape == (1, 70, 2, 1) and runs[0][1].shape == (1, 2, 33, 1)
    for x, y in zip(*runs, strict=True):
        assert torch.equal(x, y)


def test_unknown_backward_raises(monkeypatch):
    monkeypatch.setattr(gdn_chunk, "BACKWARD", "fast")
    q, k, v, g, beta, h0 = make_inputs(1, 8, 1, 16, 16)
    saved = gdn_chunk.chunk_gated_delta_rule_fwd(q, k, v, g, beta, 0.25, h0, False)[2]
    with pytest.raises(ValueError, match="BACKWARD"):
        gdn_chunk.chunk_gated_delta_rule_bwd(q, k, v, g, beta, 0.25, True, saved, v, None)
