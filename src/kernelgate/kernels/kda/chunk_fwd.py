"""Chunked forward of Kimi Delta Attention (KDA) in Triton: WY representation, state scan,
output.

Notation for one chunk of C = 16 steps of one (batch, head), positions i, j in [0, C), key
channel c; ``G``, ``G_L`` as in gla/chunk_fwd.py (float64 cumulative gates per channel):

* ``M_ij = sum_c k_ic k_jc exp(G_ic - G_jc)`` for j < i; ``A = diag(beta) M`` (strictly lower),
  ``Tinv = (I + A)^-1``.
* Unrolling the recurrence inside the chunk, the deltas u_i satisfy
  ``(I + A) U_delta = diag(beta) V - diag(beta) (K * exp(G)) H``, so with
  ``W = Tinv diag(beta) (K * exp(G))`` and ``U = Tinv diag(beta) V``: ``Vn = U - W H``.
* ``O = scale ((Q * exp(G)) H + P Vn)``, ``P_ij = sum_c q_ic k_jc exp(G_ic - G_jc) [j <= i]``;
  ``H_next = diag(exp(G_L)) H + (K * exp(G_L - G))^T Vn``.

Three kernels: ``_wy_fwd_kernel`` (one program per (chunk, batch*head): M, Tinv by forward
substitution, W, U), ``_state_fwd_kernel`` (the only sequential part: one program per
(V tile, batch*head) covering all of K, since W H mixes all key channels; the state goes
through the chunk-state buffer, not registers; stores every chunk's entering state and Vn)
and ``_output_fwd_kernel`` (one program per (V tile, chunk, batch*head); the V-tile-0
programs also store P for the backward).

Decays cannot overflow for the same reason as in GLA: every factor is ``exp(fp32(G_ic - G_jc))``
with the difference in float64, formed only where j <= i or relative to the chunk's first or
last step, so for g <= 0 none exceeds 1 (M and P are built elementwise over key channels in
[C, C, BK] tiles, affordable at C = 16). ``Tinv`` is a row-by-row forward substitution in
fp32 (backward stable). Inputs are converted to fp32 on load; Tinv, W, U, Vn, P and the states
are fp32. ``PREC`` is "ieee" for fp32 inputs and "tf32" for 16-bit ones, which reach these
kernels only with ``_precision.SIXTEEN_BIT_COMPUTE = "tf32"``: by default chunk.py passes
16-bit inputs as fp32 copies, because TF32 rounding of those fp32 intermediates would put the
fp32 outputs (state, dg, dh0) 50-240x outside the judge's bound
(benchmarks/family_dot_precision.py). No atomics: bitwise reproducible.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelgate.kernels._tiles import batch_head, chunk_rows, load_tile, store_tile
from kernelgate.kernels.gla.chunk_fwd import _gate_cumsum, _output_parts, _pair_decay


@triton.jit
def _wy_fwd_kernel(
    k_ptr,
    v_ptr,
    g_ptr,
    beta_ptr,  # inputs
    tinv_ptr,
    w_ptr,
    u_ptr,  # outputs (fp32)
    T,
    H: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NK: tl.constexpr,
    NV: tl.constexpr,
    PREC: tl.constexpr,
):
    """Per chunk: M over K tiles, Tinv = (I + diag(beta) M)^-1 row by row, then
    W = Tinv diag(beta) (K * exp(G)) and U = Tinv diag(beta) V tile by tile."""
    i_n = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_h = batch_head(i_bh, H)
    o_c = tl.arange(0, C)
    _t_idx, m_t, row = chunk_rows(i_b, i_h, i_n, T, H, C)
    strict = o_c[:, None] > o_c[None, :]
    beta = tl.load(beta_ptr + row, mask=m_t, other=0.0).to(tl.float32)

    kk = tl.zeros([C, C], dtype=tl.float32)
    for i_k in range(NK):
        o_k = i_k * BK + tl.arange(0, BK)
        g_cum, _ = _gate_cumsum(g_ptr, row, m_t, o_k, o_k < K, K, C)
        b_k = load_tile(k_ptr, row, m_t, o_k, K)
        kk += tl.sum(b_k[:, None, :] * b_k[None, :, :] * _pair_decay(g_cum, strict), axis=2)
    a = kk * beta[:, None]
    # Row-by-row forward substitution: row i of Tinv is e_i - sum_{j<i} A_ij Tinv_j, and
    # rows j < i are final when row i is built.
    tinv = tl.where(o_c[:, None] == o_c[None, :], 1.0, 0.0)
    for i in range(1, C):
        sel = (o_c == i)[:, None]
        a_i = tl.sum(tl.where(sel, a, 0.0), axis=0)
        tinv = tl.where(sel, tinv - tl.sum(a_i[:, None] * tinv, axis=0)[None, :], tinv)
    tl.store(tinv_ptr + row[:, None] * C + o_c[None, :], tinv, mask=m_t[:, None])

    for i_k in range(NK):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        g_cum, _ = _gate_cumsum(g_ptr, row, m_t, o_k, m_k, K, C)
        b_k = load_tile(k_ptr, row, m_t, o_k, K) * tl.exp(g_cum.to(tl.float32))
        b_w = tl.dot(tinv, b_k * beta[:, None], input_precision=PREC)
        store_tile(w_ptr, row, m_t, o_k, K, b_w)
    for i_v in range(NV):
        o_v = i_v * BV + tl.arange(0, BV)
        b_v = load_tile(v_ptr, row, m_t, o_v, V)
        b_u = tl.dot(tinv, b_v * beta[:, None], input_precision=PREC)
        store_tile(u_ptr, row, m_t, o_v, V, b_u)


@triton.jit(do_not_specialize=["NT", "K_END"])  # a loop count of 1 must stay a loop
def _state_fwd_kernel(
    k_ptr,
    g_ptr,
    w_ptr,
    u_ptr,
    h0_ptr,  # inputs
    h_ptr,
    vn_ptr,
    ht_ptr,  # outputs (fp32)
    T,
    NT,
    K_END,
    H: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    RK: tl.constexpr,
    BV: tl.constexpr,
    HAS_H0: tl.constexpr,
    STORE_HT: tl.constexpr,
    PREC: tl.constexpr,
):
    """Sequential scan over chunks for one (V tile, batch*head): Vn = U - W H_n,
    H_{n+1} = diag(exp(G_L)) H_n + (K * exp(G_L - G))^T Vn.

    W H_n mixes all key channels, so the program covers all of K. The state lives in the
    chunk-state buffer, not in registers (a whole [K, BV] fp32 tile spills on sm_90 at
    K = 128): step n reads H_n in row tiles of RK for Vn, then writes H_{n+1} tile by tile;
    a CTA barrier orders the steps (gdn's scans do the same, see gdn/chunk_fwd.py)."""
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_h = batch_head(i_bh, H)
    o_rk = tl.arange(0, RK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < V

    for k0 in range(0, K_END, RK):  # H_0: the initial state or zeros
        o_k = k0 + o_rk
        m_kv = (o_k < K)[:, None] & m_v[None, :]
        kv_off = o_k[:, None] * V + o_v[None, :]
        tile = tl.zeros([RK, BV], dtype=tl.float32)
        if HAS_H0:
            tile += tl.load(h0_ptr + i_bh.to(tl.int64) * K * V + kv_off, mask=m_kv, other=0.0)
        tl.store(h_ptr + (i_b * NT * H + i_h) * K * V + kv_off, tile, mask=m_kv)
    tl.debug_barrier()
    for i_n in range(0, NT):
        _t_idx, m_t, row = chunk_rows(i_b, i_h, i_n, T, H, C)
        h_base = h_ptr + ((i_b * NT + i_n) * H + i_h) * K * V
        acc = tl.zeros([C, BV], dtype=tl.float32)
        for k0 in range(0, K_END, RK):
            o_k = k0 + o_rk
            b_w = load_tile(w_ptr, row, m_t, o_k, K)
            b_h = tl.load(
                h_base + o_k[:, None] * V + o_v[None, :],
                mask=(o_k < K)[:, None] & m_v[None, :],
                other=0.0,
            )
            acc += tl.dot(b_w, b_h, input_precision=PREC)
        b_vn = load_tile(u_ptr, row, m_t, o_v, V) - acc
        store_tile(vn_ptr, row, m_t, o_v, V, b_vn)
        if i_n + 1 < NT:
            _state_step(
                k_ptr,
                g_ptr,
                h_base,
                h_base + H * K * V,
                b_vn,
                row,
                m_t,
                o_v,
                K_END,
                K,
                V,
                C,
                RK,
                PREC,
            )
        elif STORE_HT:
            _state_step(
                k_ptr,
                g_ptr,
                h_base,
                ht_ptr + i_bh.to(tl.int64) * K * V,
                b_vn,
                row,
                m_t,
                o_v,
                K_END,
                K,
                V,
                C,
                RK,
                PREC,
            )


@triton.jit
def _state_step(
    k_ptr,
    g_ptr,
    h_src,
    h_dst,
    b_vn,
    row,
    m_t,
    o_v,
    K_END,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    RK: tl.constexpr,
    PREC: tl.constexpr,
):
    """h_dst = diag(exp(G_L)) h_src + (K * exp(G_L - G))^T Vn, in row tiles of RK (the
    gates of each tile summed on the spot); ends with a CTA barrier."""
    for k0 in range(0, K_END, RK):
        o_k = k0 + tl.arange(0, RK)
        m_k = o_k < K
        m_kv = m_k[:, None] & (o_v < V)[None, :]
        kv_off = o_k[:, None] * V + o_v[None, :]
        g_cum, g_last = _gate_cumsum(g_ptr, row, m_t, o_k, m_k, K, C)
        k_decay = load_tile(k_ptr, row, m_t, o_k, K) * tl.exp(
            (g_last[None, :] - g_cum).to(tl.float32)
        )
        b_h = tl.load(h_src + kv_off, mask=m_kv, other=0.0) * tl.exp(g_last.to(tl.float32))[:, None]
        b_h += tl.dot(tl.trans(k_decay), b_vn, input_precision=PREC)
        tl.store(h_dst + kv_off, b_h, mask=m_kv)
    tl.debug_barrier()


@triton.jit
def _output_fwd_kernel(
    q_ptr,
    k_ptr,
    g_ptr,
    h_ptr,
    vn_ptr,  # inputs
    o_ptr,  # output, in v's dtype
    scores_ptr,  # output (fp32): P, stored by the V-tile-0 programs for the backward
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
    """O = scale ((Q * exp(G)) H + P Vn) for one (V tile, chunk, batch*head)."""
    i_v = tl.program_id(0)
    i_n = tl.program_id(1)
    i_bh = tl.program_id(2)
    i_b, i_h = batch_head(i_bh, H)
    o_c = tl.arange(0, C)
    o_v = i_v * BV + tl.arange(0, BV)
    _t_idx, m_t, row = chunk_rows(i_b, i_h, i_n, T, H, C)
    h_base = h_ptr + ((i_b * NT + i_n) * H + i_h) * K * V
    acc, scores = _output_parts(
        q_ptr, k_ptr, g_ptr, h_base, row, m_t, o_v, K, V, C, BK, BV, NK, PREC
    )
    if i_v == 0:  # one writer per chunk
        tl.store(scores_ptr + row[:, None] * C + o_c[None, :], scores, mask=m_t[:, None])
    b_vn = load_tile(vn_ptr, row, m_t, o_v, V)
    b_o = (acc + tl.dot(scores, b_vn, input_precision=PREC)) * scale
    store_tile(o_ptr, row, m_t, o_v, V, b_o)
