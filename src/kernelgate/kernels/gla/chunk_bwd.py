"""Chunked backward of GLA in Triton (notation as in chunk_fwd.py).

Reverse-mode derivation, per chunk with entering state H, upstream gradients dO and dH_next
(the gradient reaching the state that leaves the chunk), and the masked scores P:

* reverse state scan: ``dH = diag(exp(G_L)) dH_next + scale (Q * exp(G))^T dO``, starting from
  the final state's gradient; what is left at chunk 0 is d initial_state.
* ``dV = scale P^T dO + (K * exp(G_L - G)) dH_next``
* ``dP = scale dO V^T [j <= i]``;
  ``dQ_i = scale exp(G_i) * (dO H^T)_i + sum_j dP_ij k_j * exp(G_i - G_j)``;
  ``dK_j = sum_i dP_ij q_i * exp(G_i - G_j) + exp(G_L - G_j) * (V dH_next^T)_j``.
* gate: every factor exp(G_ic) or exp(G_ic - G_jc) multiplies q_ic or k_jc, so the gradient of
  the cumulative gate is ``dG = Q * dQ - K * dK`` elementwise, plus, at the last valid step,
  the gradient of G_L: ``exp(G_L) * rowsum(H * dH_next) + sum_j k_j * dK_state_j``
  (dK_state the state part of dK above). ``dg_t = sum_{i >= t in chunk} dG_i``.

Three kernels: ``_state_bwd_kernel`` (the reverse scan, grid (K tiles, V tiles, batch*head),
stores dH_next for every chunk), ``_dv_bwd_kernel`` (grid (V tiles, chunks, batch*head)) and
``_dqk_bwd_kernel`` (grid (K tiles, chunks, batch*head): dq, dk and dg, all three sums over
V, which it loops over). No atomics, no partial sums across programs: bitwise reproducible.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelgate.kernels._tiles import batch_head, chunk_rows, load_tile, store_tile
from kernelgate.kernels.gla.chunk_fwd import _gate_cumsum, _pair_decay


@triton.jit
def _state_bwd_kernel(
    q_ptr,
    g_ptr,
    do_ptr,
    dht_ptr,  # inputs
    dh_ptr,
    dh0_ptr,  # outputs (fp32): dH_next of every chunk, d initial_state
    T,
    NT,
    scale,
    H: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    HAS_DHT: tl.constexpr,
    STORE_DH0: tl.constexpr,
    PREC: tl.constexpr,
):
    """Reverse scan over chunks for one (K tile, V tile, batch*head)."""
    i_k = tl.program_id(0)
    i_v = tl.program_id(1)
    i_bh = tl.program_id(2)
    i_b, i_h = batch_head(i_bh, H)
    o_k = i_k * BK + tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_kv = m_k[:, None] & (o_v < V)[None, :]
    kv_off = o_k[:, None] * V + o_v[None, :]

    d_state = tl.zeros([BK, BV], dtype=tl.float32)
    if HAS_DHT:
        d_state += tl.load(dht_ptr + i_bh.to(tl.int64) * K * V + kv_off, mask=m_kv, other=0.0)
    for step in range(0, NT):
        i_n = NT - 1 - step
        tl.store(dh_ptr + ((i_b * NT + i_n) * H + i_h) * K * V + kv_off, d_state, mask=m_kv)
        _t_idx, m_t, row = chunk_rows(i_b, i_h, i_n, T, H, C)
        g_cum, g_last = _gate_cumsum(g_ptr, row, m_t, o_k, m_k, K, C)
        b_q = load_tile(q_ptr, row, m_t, o_k, K) * tl.exp(g_cum.to(tl.float32))
        b_do = load_tile(do_ptr, row, m_t, o_v, V)
        d_state = d_state * tl.exp(g_last.to(tl.float32))[:, None]
        d_state += tl.dot(tl.trans(b_q), b_do, input_precision=PREC) * scale
    if STORE_DH0:
        tl.store(dh0_ptr + i_bh.to(tl.int64) * K * V + kv_off, d_state, mask=m_kv)


@triton.jit
def _dv_bwd_kernel(
    q_ptr,
    k_ptr,
    g_ptr,
    dh_ptr,
    do_ptr,  # inputs
    dv_ptr,  # output, in v's dtype
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
    """dV = scale P^T dO + (K * exp(G_L - G)) dH_next for one (V tile, chunk, batch*head);
    P is rebuilt over K tiles exactly as the forward builds it."""
    i_v = tl.program_id(0)
    i_n = tl.program_id(1)
    i_bh = tl.program_id(2)
    i_b, i_h = batch_head(i_bh, H)
    o_c = tl.arange(0, C)
    o_v = i_v * BV + tl.arange(0, BV)
    _t_idx, m_t, row = chunk_rows(i_b, i_h, i_n, T, H, C)
    dh_base = dh_ptr + ((i_b * NT + i_n) * H + i_h) * K * V
    causal = o_c[:, None] >= o_c[None, :]

    acc = tl.zeros([C, BV], dtype=tl.float32)
    scores = tl.zeros([C, C], dtype=tl.float32)
    for i_k in range(NK):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        g_cum, g_last = _gate_cumsum(g_ptr, row, m_t, o_k, m_k, K, C)
        b_q = load_tile(q_ptr, row, m_t, o_k, K)
        b_k = load_tile(k_ptr, row, m_t, o_k, K)
        b_dh = load_tile(dh_base, o_k, m_k, o_v, V)
        k_decay = b_k * tl.exp((g_last[None, :] - g_cum).to(tl.float32))
        acc += tl.dot(k_decay, b_dh, input_precision=PREC)
        scores += tl.sum(b_q[:, None, :] * b_k[None, :, :] * _pair_decay(g_cum, causal), axis=2)
    b_do = load_tile(do_ptr, row, m_t, o_v, V)
    b_dv = acc + tl.dot(tl.trans(scores), b_do, input_precision=PREC) * scale
    store_tile(dv_ptr, row, m_t, o_v, V, b_dv)


@triton.jit
def _dqk_bwd_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    g_ptr,
    h_ptr,
    dh_ptr,
    do_ptr,  # inputs
    dq_ptr,
    dk_ptr,
    dg_ptr,  # outputs, in the dtypes of q, k, g
    T,
    NT,
    scale,
    H: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NV: tl.constexpr,
    PREC: tl.constexpr,
):
    """dq, dk and dg for one (K tile, chunk, batch*head); the sums over V (dO H^T,
    V dH_next^T, dO V^T, H * dH_next) loop over V tiles."""
    i_k = tl.program_id(0)
    i_n = tl.program_id(1)
    i_bh = tl.program_id(2)
    i_b, i_h = batch_head(i_bh, H)
    o_c = tl.arange(0, C)
    o_k = i_k * BK + tl.arange(0, BK)
    m_k = o_k < K
    _t_idx, m_t, row = chunk_rows(i_b, i_h, i_n, T, H, C)
    state_base = ((i_b * NT + i_n) * H + i_h) * K * V
    causal = o_c[:, None] >= o_c[None, :]

    acc_doh = tl.zeros([C, BK], dtype=tl.float32)  # dO H^T
    acc_vdh = tl.zeros([C, BK], dtype=tl.float32)  # V dH_next^T
    acc_hdh = tl.zeros([BK], dtype=tl.float32)  # rowsum(H * dH_next)
    d_scores = tl.zeros([C, C], dtype=tl.float32)  # dO V^T
    for i_v in range(NV):
        o_v = i_v * BV + tl.arange(0, BV)
        m_kv = m_k[:, None] & (o_v < V)[None, :]
        kv_off = o_k[:, None] * V + o_v[None, :]
        b_h = tl.load(h_ptr + state_base + kv_off, mask=m_kv, other=0.0)
        b_dh = tl.load(dh_ptr + state_base + kv_off, mask=m_kv, other=0.0)
        b_v = load_tile(v_ptr, row, m_t, o_v, V)
        b_do = load_tile(do_ptr, row, m_t, o_v, V)
        acc_doh += tl.dot(b_do, tl.trans(b_h), input_precision=PREC)
        acc_vdh += tl.dot(b_v, tl.trans(b_dh), input_precision=PREC)
        acc_hdh += tl.sum(b_h * b_dh, axis=1)
        d_scores += tl.dot(b_do, tl.trans(b_v), input_precision=PREC)
    d_scores = tl.where(causal, d_scores * scale, 0.0)

    g_cum, g_last = _gate_cumsum(g_ptr, row, m_t, o_k, m_k, K, C)
    b_q = load_tile(q_ptr, row, m_t, o_k, K)
    b_k = load_tile(k_ptr, row, m_t, o_k, K)
    decay = _pair_decay(g_cum, causal)
    b_dq = acc_doh * tl.exp(g_cum.to(tl.float32)) * scale
    b_dq += tl.sum(d_scores[:, :, None] * b_k[None, :, :] * decay, axis=1)
    dk_state = acc_vdh * tl.exp((g_last[None, :] - g_cum).to(tl.float32))
    b_dk = dk_state + tl.sum(d_scores[:, :, None] * b_q[:, None, :] * decay, axis=0)

    d_gcum = b_q * b_dq - b_k * b_dk
    d_glast = tl.exp(g_last.to(tl.float32)) * acc_hdh + tl.sum(b_k * dk_state, axis=0)
    last = tl.minimum(C, T - i_n * C) - 1
    d_gcum += tl.where((o_c == last)[:, None], d_glast[None, :], 0.0)
    # dg_t = sum over i >= t of dG_i, summed in a fixed order.
    suffix = (o_c[None, :] >= o_c[:, None])[:, :, None]
    b_dg = tl.sum(tl.where(suffix, d_gcum[None, :, :], 0.0), axis=1)

    m_tk = m_t[:, None] & m_k[None, :]
    tk_off = row[:, None] * K + o_k[None, :]
    tl.store(dq_ptr + tk_off, b_dq.to(dq_ptr.dtype.element_ty), mask=m_tk)
    tl.store(dk_ptr + tk_off, b_dk.to(dk_ptr.dtype.element_ty), mask=m_tk)
    tl.store(dg_ptr + tk_off, b_dg.to(dg_ptr.dtype.element_ty), mask=m_tk)
