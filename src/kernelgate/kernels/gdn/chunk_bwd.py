"""Chunked backward of Gated DeltaNet in Triton (notation as in chunk_fwd.py).

Reverse-mode derivation, per chunk with entering state H and upstream gradients dO and
dH_next (the gradient reaching the state that leaves the chunk):

* ``dVn = scale * (Q K^T * decay * [j <= i])^T dO + diag(exp(G_L - G)) K dH_next``
* ``dH  = exp(G_L) dH_next + scale * (diag(gamma) Q)^T dO - W^T dVn`` (reverse state scan)
* ``dQ  = scale * (diag(gamma) dO H^T + dS K)`` with ``dS = (dO Vn^T) * decay * [j <= i]``
* ``dK += scale * dS^T Q + diag(exp(G_L - G)) Vn dH_next^T``; ``dW = -dVn H^T``, ``dU = dVn``
* WY part: ``dV = diag(beta) Tinv^T dU``, ``dK += diag(beta gamma) Tinv^T dW``,
  ``dTinv = dW (diag(beta gamma) K)^T + dU (diag(beta) V)^T``, ``dA = -Tinv^T dTinv Tinv^T``
  (strictly lower part), and A = diag(beta) (K K^T) * decay gives dK, dbeta and dG terms.
* every dependence on the gate goes through G; ``dg`` is the reverse cumulative sum of dG
  inside the chunk plus the gradient of G_L (which every step of the chunk feeds).

Three kernels: ``_state_bwd_kernel`` (reverse scan, one program per (batch, head, V block)),
``_qk_bwd_kernel`` (one program per chunk and K block; loops over V blocks) and
``_wy_bwd_kernel`` (one program per chunk; loops over K and V blocks, sums the K-block
partials of the previous kernel in a fixed order and writes dk, dv, dbeta, dg). Partial
results go through fp32 scratch buffers, never atomics, so gradients are bitwise reproducible.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelgate.kernels.gdn.chunk_fwd import _load_gate_cumsum


@triton.jit
def _state_bwd_kernel(
    q_ptr,
    k_ptr,
    w_ptr,
    gcum_ptr,
    do_ptr,
    dht_ptr,  # inputs
    dh_ptr,
    dvn_ptr,
    dh0_ptr,  # outputs (fp32)
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
    """Reverse scan: stores dH_next for every chunk and the complete gradient of Vn."""
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = (i_bh // H).to(tl.int64)
    i_h = i_bh % H
    o_c = tl.arange(0, C)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    m_kv = m_k[:, None] & m_v[None, :]
    kv_off = o_k[:, None] * V + o_v[None, :]
    causal_t = o_c[:, None] <= o_c[None, :]  # [j, i]: key j is visible to query i

    d_state = tl.zeros([BK, BV], dtype=tl.float32)
    if HAS_DHT:
        d_state += tl.load(dht_ptr + i_bh.to(tl.int64) * K * V + kv_off, mask=m_kv, other=0.0)
    for step in range(0, NT):
        i_n = NT - 1 - step
        t_idx = i_n * C + o_c
        m_t = t_idx < T
        row = (i_b * T + t_idx) * H + i_h
        m_tk = m_t[:, None] & m_k[None, :]
        m_tv = m_t[:, None] & m_v[None, :]
        tl.store(dh_ptr + ((i_b * NT + i_n) * H + i_h) * K * V + kv_off, d_state, mask=m_kv)
        b_q = tl.load(q_ptr + row[:, None] * K + o_k[None, :], mask=m_tk, other=0.0).to(tl.float32)
        b_k = tl.load(k_ptr + row[:, None] * K + o_k[None, :], mask=m_tk, other=0.0).to(tl.float32)
        b_w = tl.load(w_ptr + row[:, None] * K + o_k[None, :], mask=m_tk, other=0.0)
        b_do = tl.load(do_ptr + row[:, None] * V + o_v[None, :], mask=m_tv, other=0.0).to(
            tl.float32
        )
        g_cum, g_last = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H, C)

        decay_t = tl.where(
            causal_t, tl.exp(tl.where(causal_t, g_cum[None, :] - g_cum[:, None], 0.0)), 0.0
        )
        scores_t = tl.dot(b_k, tl.trans(b_q), input_precision=PREC) * decay_t * scale
        k_decay = tl.where(m_t, tl.exp(g_last - g_cum), 0.0)
        b_dvn = tl.dot(scores_t, b_do, input_precision=PREC)
        b_dvn += tl.dot(b_k, d_state, input_precision=PREC) * k_decay[:, None]
        tl.store(dvn_ptr + row[:, None] * V + o_v[None, :], b_dvn, mask=m_tv)

        q_gamma = b_q * (tl.exp(g_cum) * scale)[:, None]
        d_state = d_state * tl.exp(g_last) + tl.dot(tl.trans(q_gamma), b_do, input_precision=PREC)
        d_state -= tl.dot(tl.trans(b_w), b_dvn, input_precision=PREC)
    if STORE_DH0:
        tl.store(dh0_ptr + i_bh.to(tl.int64) * K * V + kv_off, d_state, mask=m_kv)


@triton.jit
def _qk_bwd_kernel(
    q_ptr,
    k_ptr,
    gcum_ptr,
    h_ptr,
    dh_ptr,
    vn_ptr,
    dvn_ptr,
    do_ptr,  # inputs
    dq_ptr,
    dk_part_ptr,
    dw_ptr,
    dgcum_part_ptr,
    dglast_part_ptr,  # outputs
    T,
    NT,
    B,
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
    """dq (final), the output/state part of dk, dW = -dVn H^T and this K block's share of the
    gate gradient (every gate term here is a sum over K, so K-block partials just add up)."""
    i_kb = tl.program_id(0)
    i_n = tl.program_id(1)
    i_bh = tl.program_id(2)
    i_b = (i_bh // H).to(tl.int64)
    i_h = i_bh % H
    o_c = tl.arange(0, C)
    o_k = i_kb * BK + tl.arange(0, BK)
    m_k = o_k < K
    t_idx = i_n * C + o_c
    m_t = t_idx < T
    row = (i_b * T + t_idx) * H + i_h
    m_tk = m_t[:, None] & m_k[None, :]
    state_base = ((i_b * NT + i_n) * H + i_h) * K * V

    acc_dq = tl.zeros([C, BK], dtype=tl.float32)  # dO H^T
    acc_dk = tl.zeros([C, BK], dtype=tl.float32)  # Vn dH_next^T
    acc_dw = tl.zeros([C, BK], dtype=tl.float32)  # dVn H^T
    acc_dov = tl.zeros([C, C], dtype=tl.float32)  # dO Vn^T
    acc_hdh = tl.zeros([BK], dtype=tl.float32)  # sum over V of H * dH_next
    for i_v in range(NV):
        o_v = i_v * BV + tl.arange(0, BV)
        m_v = o_v < V
        m_tv = m_t[:, None] & m_v[None, :]
        m_kv = m_k[:, None] & m_v[None, :]
        kv_off = o_k[:, None] * V + o_v[None, :]
        b_h = tl.load(h_ptr + state_base + kv_off, mask=m_kv, other=0.0)
        b_dh = tl.load(dh_ptr + state_base + kv_off, mask=m_kv, other=0.0)
        b_vn = tl.load(vn_ptr + row[:, None] * V + o_v[None, :], mask=m_tv, other=0.0)
        b_dvn = tl.load(dvn_ptr + row[:, None] * V + o_v[None, :], mask=m_tv, other=0.0)
        b_do = tl.load(do_ptr + row[:, None] * V + o_v[None, :], mask=m_tv, other=0.0).to(
            tl.float32
        )
        acc_dq += tl.dot(b_do, tl.trans(b_h), input_precision=PREC)
        acc_dk += tl.dot(b_vn, tl.trans(b_dh), input_precision=PREC)
        acc_dw += tl.dot(b_dvn, tl.trans(b_h), input_precision=PREC)
        acc_dov += tl.dot(b_do, tl.trans(b_vn), input_precision=PREC)
        acc_hdh += tl.sum(b_h * b_dh, axis=1)

    b_q = tl.load(q_ptr + row[:, None] * K + o_k[None, :], mask=m_tk, other=0.0).to(tl.float32)
    b_k = tl.load(k_ptr + row[:, None] * K + o_k[None, :], mask=m_tk, other=0.0).to(tl.float32)
    g_cum, g_last = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H, C)

    causal = o_c[:, None] >= o_c[None, :]
    decay = tl.where(causal, tl.exp(tl.where(causal, g_cum[:, None] - g_cum[None, :], 0.0)), 0.0)
    d_scores = acc_dov * decay * scale  # gradient of the masked, decayed Q K^T
    dq_inter = acc_dq * (tl.exp(g_cum) * scale)[:, None]
    b_dq = dq_inter + tl.dot(d_scores, b_k, input_precision=PREC)
    k_decay = tl.where(m_t, tl.exp(g_last - g_cum), 0.0)
    dk_state = acc_dk * k_decay[:, None]
    b_dk = tl.dot(tl.trans(d_scores), b_q, input_precision=PREC) + dk_state
    tl.store(dq_ptr + row[:, None] * K + o_k[None, :], b_dq.to(dq_ptr.dtype.element_ty), mask=m_tk)
    tl.store(dk_part_ptr + row[:, None] * K + o_k[None, :], b_dk, mask=m_tk)
    tl.store(dw_ptr + row[:, None] * K + o_k[None, :], -acc_dw, mask=m_tk)

    # Gate terms (partial over this K block): dG_i gets q_i . dq_inter_i, the row sums minus
    # the column sums of dS * (q k^T), and -k_j . dk_state_j; G_L gets the rest.
    qk = tl.dot(b_q, tl.trans(b_k), input_precision=PREC)
    e = d_scores * qk
    k_dk_state = tl.sum(b_k * dk_state, axis=1)
    d_gcum = tl.sum(b_q * dq_inter, axis=1) + tl.sum(e, axis=1) - tl.sum(e, axis=0) - k_dk_state
    d_glast = tl.sum(k_dk_state, axis=0) + tl.exp(g_last) * tl.sum(acc_hdh, axis=0)
    part_row = (i_kb * B + i_b) * T + t_idx  # [NK, B, T, H] layout
    tl.store(dgcum_part_ptr + part_row * H + i_h, d_gcum, mask=m_t)
    tl.store(dglast_part_ptr + ((i_kb * B + i_b) * NT + i_n) * H + i_h, d_glast)


@triton.jit
def _wy_bwd_kernel(
    k_ptr,
    v_ptr,
    beta_ptr,
    gcum_ptr,
    ainv_ptr,
    dw_ptr,
    dvn_ptr,
    dk_part_ptr,  # inputs
    dgcum_part_ptr,
    dglast_part_ptr,  # inputs (K-block partials)
    dk_ptr,
    dv_ptr,
    dbeta_ptr,
    dg_ptr,  # outputs
    T,
    NT,
    B,
    H: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    NK: tl.constexpr,
    NV: tl.constexpr,
    NK_PART: tl.constexpr,
    PREC: tl.constexpr,
):
    """Back through W = Tinv diag(beta gamma) K, U = Tinv diag(beta) V and Tinv = (I + A)^-1;
    finishes dk, dv, dbeta and dg (reverse cumulative sum of dG inside the chunk)."""
    i_n = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = (i_bh // H).to(tl.int64)
    i_h = i_bh % H
    o_c = tl.arange(0, C)
    t_idx = i_n * C + o_c
    m_t = t_idx < T
    row = (i_b * T + t_idx) * H + i_h

    beta = tl.load(beta_ptr + row, mask=m_t, other=0.0).to(tl.float32)
    g_cum, _ = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H, C)
    gamma = tl.where(m_t, tl.exp(g_cum), 0.0)
    tinv = tl.load(ainv_ptr + row[:, None] * C + o_c[None, :], mask=m_t[:, None], other=0.0)

    # Pass 1: dTinv and K K^T.
    d_tinv = tl.zeros([C, C], dtype=tl.float32)
    kk = tl.zeros([C, C], dtype=tl.float32)
    for i_k in range(NK):
        o_k = i_k * BK + tl.arange(0, BK)
        m_tk = m_t[:, None] & (o_k < K)[None, :]
        b_k = tl.load(k_ptr + row[:, None] * K + o_k[None, :], mask=m_tk, other=0.0).to(tl.float32)
        b_dw = tl.load(dw_ptr + row[:, None] * K + o_k[None, :], mask=m_tk, other=0.0)
        d_tinv += tl.dot(b_dw, tl.trans(b_k * (beta * gamma)[:, None]), input_precision=PREC)
        kk += tl.dot(b_k, tl.trans(b_k), input_precision=PREC)
    for i_v in range(NV):
        o_v = i_v * BV + tl.arange(0, BV)
        m_tv = m_t[:, None] & (o_v < V)[None, :]
        b_v = tl.load(v_ptr + row[:, None] * V + o_v[None, :], mask=m_tv, other=0.0).to(tl.float32)
        b_du = tl.load(dvn_ptr + row[:, None] * V + o_v[None, :], mask=m_tv, other=0.0)
        d_tinv += tl.dot(b_du, tl.trans(b_v * beta[:, None]), input_precision=PREC)

    strict = o_c[:, None] > o_c[None, :]
    decay = tl.where(strict, tl.exp(tl.where(strict, g_cum[:, None] - g_cum[None, :], 0.0)), 0.0)
    tinv_t = tl.trans(tinv)
    d_a = -tl.dot(tl.dot(tinv_t, d_tinv, input_precision=PREC), tinv_t, input_precision=PREC)
    p = tl.where(strict, d_a, 0.0) * decay  # gradient reaching beta_i (k_i . k_j)
    p_kk = p * kk
    d_beta = tl.sum(p_kk, axis=1)
    e = p_kk * beta[:, None]  # gradient reaching the decay, times the decay
    d_gcum = tl.sum(e, axis=1) - tl.sum(e, axis=0)
    p_beta = p * beta[:, None]

    # Pass 2: dk, dv, and the beta and gate terms of W and U.
    for i_k in range(NK):
        o_k = i_k * BK + tl.arange(0, BK)
        m_tk = m_t[:, None] & (o_k < K)[None, :]
        b_k = tl.load(k_ptr + row[:, None] * K + o_k[None, :], mask=m_tk, other=0.0).to(tl.float32)
        b_dw = tl.load(dw_ptr + row[:, None] * K + o_k[None, :], mask=m_tk, other=0.0)
        b_dk = tl.load(dk_part_ptr + row[:, None] * K + o_k[None, :], mask=m_tk, other=0.0)
        t_dw = tl.dot(tinv_t, b_dw, input_precision=PREC)
        b_dk += t_dw * (beta * gamma)[:, None]
        b_dk += tl.dot(p_beta, b_k, input_precision=PREC)
        b_dk += tl.dot(tl.trans(p_beta), b_k, input_precision=PREC)
        k_tdw = tl.sum(b_k * t_dw, axis=1)
        d_beta += gamma * k_tdw
        d_gcum += beta * gamma * k_tdw
        tl.store(
            dk_ptr + row[:, None] * K + o_k[None, :], b_dk.to(dk_ptr.dtype.element_ty), mask=m_tk
        )
    for i_v in range(NV):
        o_v = i_v * BV + tl.arange(0, BV)
        m_tv = m_t[:, None] & (o_v < V)[None, :]
        b_v = tl.load(v_ptr + row[:, None] * V + o_v[None, :], mask=m_tv, other=0.0).to(tl.float32)
        b_du = tl.load(dvn_ptr + row[:, None] * V + o_v[None, :], mask=m_tv, other=0.0)
        t_du = tl.dot(tinv_t, b_du, input_precision=PREC)
        d_beta += tl.sum(b_v * t_du, axis=1)
        tl.store(
            dv_ptr + row[:, None] * V + o_v[None, :],
            (t_du * beta[:, None]).to(dv_ptr.dtype.element_ty),
            mask=m_tv,
        )

    # K-block partials of the output/state gate terms, summed in a fixed order.
    d_glast = 0.0
    for i_kb in range(NK_PART):
        part_row = (i_kb * B + i_b) * T + t_idx
        d_gcum += tl.load(dgcum_part_ptr + part_row * H + i_h, mask=m_t, other=0.0)
        d_glast += tl.load(dglast_part_ptr + ((i_kb * B + i_b) * NT + i_n) * H + i_h)
    d_gcum = tl.where(m_t, d_gcum, 0.0)
    # dg_t = sum_{i >= t} dG_i + dG_L (G_L is the sum of every g of the chunk).
    suffix = o_c[:, None] <= o_c[None, :]
    d_g = tl.sum(tl.where(suffix, d_gcum[None, :], 0.0), axis=1) + d_glast
    tl.store(dbeta_ptr + row, d_beta.to(dbeta_ptr.dtype.element_ty), mask=m_t)
    tl.store(dg_ptr + row, d_g.to(dg_ptr.dtype.element_ty), mask=m_t)
