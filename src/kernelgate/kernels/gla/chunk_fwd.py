"""Chunked forward of gated linear attention (GLA) in Triton: state scan, then output.

Notation for one chunk of C = 16 steps of one (batch, head), positions i, j in [0, C), key
channel c:

* ``G_ic`` = cumulative sum of g_c inside the chunk (float64), ``G_L`` = G of the last valid
  step (padded tail steps carry g = 0, so ``G_L`` = the chunk's sum of g).
* with ``H`` the state entering the chunk::

      O      = scale * ((Q * exp(G)) H + P V),  P_ij = sum_c q_ic k_jc exp(G_ic - G_jc) [j <= i]
      H_next = diag(exp(G_L)) H + (K * exp(G_L - G))^T V

Two kernels: ``_state_fwd_kernel`` (the only sequential part: one program per (K tile, V tile,
batch*head); GLA's state rows evolve independently, so K splits as freely as V) stores every
chunk's entering state; ``_output_fwd_kernel`` (one program per (V tile, chunk, batch*head))
builds P and O.

Why the decays cannot overflow: every decay factor is formed directly as
``exp(fp32(G_ic - G_jc))`` with the difference taken in float64, only where it is used
(``j <= i`` inside the chunk, or relative to the chunk's first or last step). For g <= 0 every
exponent is <= 0, so no factor exceeds 1, whatever the magnitude of g; there is no factorised
``exp(G_i) * exp(-G_j)`` (whose second factor overflows fp32 once a chunk's cumulative decay
passes -88). P is therefore built elementwise over key channels ([C, C, BK] tiles), which is
affordable because C = 16. A positive g is safe as long as one chunk's sum stays below 88
(g < 5.5 per step): then only the recurrence itself grows. Differences of float64 cumulative
sums keep nearby steps' factors accurate to fp32 roundoff even when |G| reaches hundreds
(gdn's CMP-01 ``large`` finding, see docs/kernels/gdn.md).

Inputs are converted to fp32 on load; the state, P and every accumulation are fp32. ``PREC``
is "ieee" for fp32 inputs (never TF32) and "tf32" for 16-bit ones, which reach these kernels
only with ``_precision.SIXTEEN_BIT_COMPUTE = "tf32"``: by default chunk.py passes 16-bit
inputs as fp32 copies, because TF32 rounding of the fp32 intermediates (states, decayed keys
and queries, their gradients) would put the fp32 outputs (state, dg, dh0) 24-150x outside
the judge's bound (benchmarks/family_dot_precision.py). No atomics: results are bitwise
reproducible.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelgate.kernels._tiles import batch_head, chunk_rows, load_tile, store_tile


@triton.jit
def _gate_cumsum(g_ptr, row, m_t, o_k, m_k, K: tl.constexpr, C: tl.constexpr):
    """The chunk's float64 cumulative gates G [C, BK] and G_L [BK]. Padded steps and channels
    load g = 0, so padded rows repeat G_L and padded channels stay 0."""
    g = tl.load(
        g_ptr + row[:, None] * K + o_k[None, :], mask=m_t[:, None] & m_k[None, :], other=0.0
    ).to(tl.float64)
    g_cum = tl.cumsum(g, axis=0)
    last = (tl.arange(0, C) == C - 1)[:, None]
    return g_cum, tl.sum(tl.where(last, g_cum, 0.0), axis=0)


@triton.jit
def _pair_decay(g_cum, valid):
    """[C, C, BK]: exp(G_ic - G_jc) where ``valid[i, j]`` (else 0). The difference is taken in
    float64 and rounded once; masked pairs never reach exp, where G_i - G_j > 0 (j > i) could
    overflow."""
    valid3 = valid[:, :, None]
    diff = tl.where(valid3, g_cum[:, None, :] - g_cum[None, :, :], 0.0)
    return tl.where(valid3, tl.exp(diff.to(tl.float32)), 0.0)


@triton.jit
def _state_fwd_kernel(
    k_ptr,
    v_ptr,
    g_ptr,
    h0_ptr,  # inputs
    h_ptr,
    ht_ptr,  # outputs (fp32): every chunk's entering state, the final state
    T,
    NT,
    H: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    HAS_H0: tl.constexpr,
    STORE_HT: tl.constexpr,
    PREC: tl.constexpr,
):
    """Sequential scan over chunks for one (K tile, V tile, batch*head):
    H_{n+1} = diag(exp(G_L)) H_n + (K * exp(G_L - G))^T V, storing each H_n."""
    i_k = tl.program_id(0)
    i_v = tl.program_id(1)
    i_bh = tl.program_id(2)
    i_b, i_h = batch_head(i_bh, H)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_kv = m_k[:, None] & (o_v < V)[None, :]
    kv_off = o_k[:, None] * V + o_v[None, :]

    state = tl.zeros([BK, BV], dtype=tl.float32)
    if HAS_H0:
        state += tl.load(h0_ptr + i_bh.to(tl.int64) * K * V + kv_off, mask=m_kv, other=0.0)
    for i_n in range(0, NT):
        tl.store(h_ptr + ((i_b * NT + i_n) * H + i_h) * K * V + kv_off, state, mask=m_kv)
        _t_idx, m_t, row = chunk_rows(i_b, i_h, i_n, T, H, C)
        g_cum, g_last = _gate_cumsum(g_ptr, row, m_t, o_k, m_k, K, C)
        b_k = load_tile(k_ptr, row, m_t, o_k, K)
        b_v = load_tile(v_ptr, row, m_t, o_v, V)
        k_decay = b_k * tl.exp((g_last[None, :] - g_cum).to(tl.float32))
        state = state * tl.exp(g_last.to(tl.float32))[:, None]
        state += tl.dot(tl.trans(k_decay), b_v, input_precision=PREC)
    if STORE_HT:
        tl.store(ht_ptr + i_bh.to(tl.int64) * K * V + kv_off, state, mask=m_kv)


@triton.jit
def _output_parts(
    q_ptr,
    k_ptr,
    g_ptr,
    h_base,
    row,
    m_t,
    o_v,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NK: tl.constexpr,
    PREC: tl.constexpr,
):
    """The two parts of one chunk's output over K tiles, as GLA's and KDA's forward both
    build them: (Q * exp(G)) H for the V tile o_v of the entering state at ``h_base``, and
    P = sum_c q_ic k_jc exp(G_ic - G_jc) [j <= i] elementwise (see the module docstring).
    Returns (acc [C, BV], scores [C, C])."""
    o_c = tl.arange(0, C)
    causal = o_c[:, None] >= o_c[None, :]
    acc = tl.zeros([C, BV], dtype=tl.float32)
    scores = tl.zeros([C, C], dtype=tl.float32)
    for i_k in range(NK):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        g_cum, _ = _gate_cumsum(g_ptr, row, m_t, o_k, m_k, K, C)
        b_q = load_tile(q_ptr, row, m_t, o_k, K)
        b_k = load_tile(k_ptr, row, m_t, o_k, K)
        b_h = load_tile(h_base, o_k, m_k, o_v, V)
        acc += tl.dot(b_q * tl.exp(g_cum.to(tl.float32)), b_h, input_precision=PREC)
        scores += tl.sum(b_q[:, None, :] * b_k[None, :, :] * _pair_decay(g_cum, causal), axis=2)
    return acc, scores


@triton.jit
def _output_fwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    g_ptr,
    h_ptr,  # inputs
    o_ptr,  # output, in v's dtype
    T,
    NT,
    scale,
    H: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NK: tl.constexpr,
    PREC: tl.constexpr,
):
    """O = scale * ((Q * exp(G)) H + P V) for one (V tile, chunk, batch*head); P is built over
    K tiles elementwise (see the module docstring)."""
    i_v = tl.program_id(0)
    i_n = tl.program_id(1)
    i_bh = tl.program_id(2)
    i_b, i_h = batch_head(i_bh, H)
    o_v = i_v * BV + tl.arange(0, BV)
    _t_idx, m_t, row = chunk_rows(i_b, i_h, i_n, T, H, C)
    h_base = h_ptr + ((i_b * NT + i_n) * H + i_h) * K * V
    acc, scores = _output_parts(
        q_ptr, k_ptr, g_ptr, h_base, row, m_t, o_v, K, V, C, BK, BV, NK, PREC
    )
    b_v = load_tile(v_ptr, row, m_t, o_v, V)
    b_o = (acc + tl.dot(scores, b_v, input_precision=PREC)) * scale
    store_tile(o_ptr, row, m_t, o_v, V, b_o)
