"""Chunked backward of KDA in Triton (notation as in chunk_fwd.py).

Reverse-mode derivation, per chunk with entering state H, upstream gradients dO and dH_next:

* ``dVn = scale P^T dO + (K * exp(G_L - G)) dH_next``
* reverse state scan: ``dH = diag(exp(G_L)) dH_next + scale (Q * exp(G))^T dO - W^T dVn``;
  what is left at chunk 0 is d initial_state.
* ``dP = scale dO Vn^T [j <= i]``; ``dQ = scale exp(G) * (dO H^T) + (dP terms)``,
  ``dK += (dP terms) + exp(G_L - G) * (Vn dH_next^T)``; ``dW = -dVn H^T``, ``dU = dVn``
  (the dP terms exactly as in GLA, gla/chunk_bwd.py).
* WY part: ``dV = diag(beta) Tinv^T dU``; ``dK += diag(beta) exp(G) * (Tinv^T dW)``;
  ``dTinv = dW (diag(beta) K exp(G))^T + dU (diag(beta) V)^T``,
  ``dA = -Tinv^T dTinv Tinv^T`` (strictly lower), ``dbeta_i = sum_j dA_ij M_ij +
  (Tinv^T dW)_i . (k_i exp(G_i)) + (Tinv^T dU)_i . v_i``, and with ``dM = diag(beta) dA``:
  ``dK_i += sum_j dM_ij k_j exp(G_i - G_j)``, ``dK_j += sum_i dM_ij k_i exp(G_i - G_j)``.
* gate: each factor exp(G_ic) or exp(G_ic - G_jc) multiplies a q_ic or k_ic (k_jc), so
  ``dG = Q * dQ + K * (dK_W + dK_Mrow) - K * (dK_P + dK_state + dK_Mcol)``, plus at the last
  valid step ``exp(G_L) * rowsum(H * dH_next) + sum_j k_j * dK_state_j``;
  ``dg_t = sum_{i >= t in chunk} dG_i``.

Three kernels: ``_state_bwd_kernel`` (reverse scan, grid (V tiles, batch*head), all of K,
the state gradient in its chunk buffer; stores dH_next per chunk and dVn),
``_dqk_bwd_kernel`` (grid (K tiles, chunks, batch*head): dq, the output/state part of dk and
of dG, dW) and ``_wy_bwd_kernel`` (grid (chunks, batch*head): the WY part; finishes dk, dv,
dbeta, dg). Partial results go through
fp32 buffers, never atomics: bitwise reproducible.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelgate.kernels._tiles import batch_head, chunk_rows, load_tile, store_tile
from kernelgate.kernels.gla.chunk_fwd import _gate_cumsum, _pair_decay


@triton.jit(do_not_specialize=["NT", "K_END"])  # a loop count of 1 must stay a loop
def _state_bwd_kernel(
    q_ptr,
    k_ptr,
    g_ptr,
    w_ptr,
    scores_ptr,
    do_ptr,
    dht_ptr,  # inputs
    dh_ptr,
    dvn_ptr,
    dh0_ptr,  # outputs (fp32)
    T,
    NT,
    K_END,
    scale,
    H: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    RK: tl.constexpr,
    BV: tl.constexpr,
    HAS_DHT: tl.constexpr,
    STORE_DH0: tl.constexpr,
    PREC: tl.constexpr,
):
    """Reverse scan for one (V tile, batch*head): stores dH_next of every chunk and dVn.
    Like the forward scan, the state gradient lives in its chunk buffer, read and written in
    row tiles of RK, with a CTA barrier between steps."""
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_h = batch_head(i_bh, H)
    o_c = tl.arange(0, C)
    o_rk = tl.arange(0, RK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < V

    for k0 in range(0, K_END, RK):  # dH_next of the last chunk: d final state or zeros
        o_k = k0 + o_rk
        m_kv = (o_k < K)[:, None] & m_v[None, :]
        kv_off = o_k[:, None] * V + o_v[None, :]
        tile = tl.zeros([RK, BV], dtype=tl.float32)
        if HAS_DHT:
            tile += tl.load(dht_ptr + i_bh.to(tl.int64) * K * V + kv_off, mask=m_kv, other=0.0)
        tl.store(dh_ptr + ((i_b * NT + NT - 1) * H + i_h) * K * V + kv_off, tile, mask=m_kv)
    tl.debug_barrier()
    for step in range(0, NT):
        i_n = NT - 1 - step
        _t_idx, m_t, row = chunk_rows(i_b, i_h, i_n, T, H, C)
        dh_base = dh_ptr + ((i_b * NT + i_n) * H + i_h) * K * V
        b_do = load_tile(do_ptr, row, m_t, o_v, V)
        scores = load_tile(scores_ptr, row, m_t, o_c, C)
        b_dvn = tl.dot(tl.trans(scores), b_do, input_precision=PREC) * scale
        for k0 in range(0, K_END, RK):
            o_k = k0 + o_rk
            m_k = o_k < K
            g_cum, g_last = _gate_cumsum(g_ptr, row, m_t, o_k, m_k, K, C)
            k_decay = load_tile(k_ptr, row, m_t, o_k, K) * tl.exp(
                (g_last[None, :] - g_cum).to(tl.float32)
            )
            b_dh = load_tile(dh_base, o_k, m_k, o_v, V)
            b_dvn += tl.dot(k_decay, b_dh, input_precision=PREC)
        store_tile(dvn_ptr, row, m_t, o_v, V, b_dvn)
        if i_n > 0:
            _state_bwd_step(
                q_ptr,
                g_ptr,
                w_ptr,
                dh_base,
                dh_base - H * K * V,
                b_do,
                b_dvn,
                row,
                m_t,
                o_v,
                K_END,
                scale,
                K,
                V,
                C,
                RK,
                PREC,
            )
        elif STORE_DH0:
            _state_bwd_step(
                q_ptr,
                g_ptr,
                w_ptr,
                dh_base,
                dh0_ptr + i_bh.to(tl.int64) * K * V,
                b_do,
                b_dvn,
                row,
                m_t,
                o_v,
                K_END,
                scale,
                K,
                V,
                C,
                RK,
                PREC,
            )


@triton.jit
def _state_bwd_step(
    q_ptr,
    g_ptr,
    w_ptr,
    src,
    dst,
    b_do,
    b_dvn,
    row,
    m_t,
    o_v,
    K_END,
    scale,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    RK: tl.constexpr,
    PREC: tl.constexpr,
):
    """dst = diag(exp(G_L)) src + scale (Q * exp(G))^T dO - W^T dVn, in row tiles of RK;
    ends with a CTA barrier."""
    for k0 in range(0, K_END, RK):
        o_k = k0 + tl.arange(0, RK)
        m_k = o_k < K
        m_kv = m_k[:, None] & (o_v < V)[None, :]
        kv_off = o_k[:, None] * V + o_v[None, :]
        g_cum, g_last = _gate_cumsum(g_ptr, row, m_t, o_k, m_k, K, C)
        b_q = load_tile(q_ptr, row, m_t, o_k, K) * tl.exp(g_cum.to(tl.float32))
        b_w = load_tile(w_ptr, row, m_t, o_k, K)
        b_dh = tl.load(src + kv_off, mask=m_kv, other=0.0) * tl.exp(g_last.to(tl.float32))[:, None]
        b_dh += tl.dot(tl.trans(b_q), b_do, input_precision=PREC) * scale
        b_dh -= tl.dot(tl.trans(b_w), b_dvn, input_precision=PREC)
        tl.store(dst + kv_off, b_dh, mask=m_kv)
    tl.debug_barrier()


@triton.jit
def _dqk_bwd_kernel(
    q_ptr,
    k_ptr,
    g_ptr,
    h_ptr,
    dh_ptr,
    vn_ptr,
    dvn_ptr,
    do_ptr,  # inputs
    dq_ptr,  # output, in q's dtype
    dk_part_ptr,
    dg_part_ptr,
    dw_ptr,  # outputs (fp32)
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
    """dq (final), dk and dG from the output and the state (partial), dW = -dVn H^T, for one
    (K tile, chunk, batch*head); the sums over V loop over V tiles."""
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
    acc_vdh = tl.zeros([C, BK], dtype=tl.float32)  # Vn dH_next^T
    acc_dw = tl.zeros([C, BK], dtype=tl.float32)  # dVn H^T
    acc_hdh = tl.zeros([BK], dtype=tl.float32)  # rowsum(H * dH_next)
    d_scores = tl.zeros([C, C], dtype=tl.float32)  # dO Vn^T
    for i_v in range(NV):
        o_v = i_v * BV + tl.arange(0, BV)
        m_kv = m_k[:, None] & (o_v < V)[None, :]
        kv_off = o_k[:, None] * V + o_v[None, :]
        b_h = tl.load(h_ptr + state_base + kv_off, mask=m_kv, other=0.0)
        b_dh = tl.load(dh_ptr + state_base + kv_off, mask=m_kv, other=0.0)
        b_vn = load_tile(vn_ptr, row, m_t, o_v, V)
        b_dvn = load_tile(dvn_ptr, row, m_t, o_v, V)
        b_do = load_tile(do_ptr, row, m_t, o_v, V)
        acc_doh += tl.dot(b_do, tl.trans(b_h), input_precision=PREC)
        acc_vdh += tl.dot(b_vn, tl.trans(b_dh), input_precision=PREC)
        acc_dw += tl.dot(b_dvn, tl.trans(b_h), input_precision=PREC)
        acc_hdh += tl.sum(b_h * b_dh, axis=1)
        d_scores += tl.dot(b_do, tl.trans(b_vn), input_precision=PREC)
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

    m_tk = m_t[:, None] & m_k[None, :]
    tk_off = row[:, None] * K + o_k[None, :]
    tl.store(dq_ptr + tk_off, b_dq.to(dq_ptr.dtype.element_ty), mask=m_tk)
    tl.store(dk_part_ptr + tk_off, b_dk, mask=m_tk)
    tl.store(dg_part_ptr + tk_off, d_gcum, mask=m_tk)
    tl.store(dw_ptr + tk_off, -acc_dw, mask=m_tk)


@triton.jit
def _wy_bwd_kernel(
    k_ptr,
    v_ptr,
    g_ptr,
    beta_ptr,
    tinv_ptr,
    dw_ptr,
    dvn_ptr,
    dk_part_ptr,
    dg_part_ptr,  # inputs
    dk_ptr,
    dv_ptr,
    dg_ptr,
    dbeta_ptr,  # outputs, in the dtypes of k, v, g, beta
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
    """Back through W = Tinv diag(beta) (K exp(G)), U = Tinv diag(beta) V and
    Tinv = (I + diag(beta) M)^-1 for one (chunk, batch*head); finishes dk, dv, dg, dbeta."""
    i_n = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_h = batch_head(i_bh, H)
    o_c = tl.arange(0, C)
    _t_idx, m_t, row = chunk_rows(i_b, i_h, i_n, T, H, C)
    strict = o_c[:, None] > o_c[None, :]
    beta = tl.load(beta_ptr + row, mask=m_t, other=0.0).to(tl.float32)
    tinv = load_tile(tinv_ptr, row, m_t, o_c, C)
    tinv_t = tl.trans(tinv)

    # Pass 1: dTinv and M.
    d_tinv = tl.zeros([C, C], dtype=tl.float32)
    kk = tl.zeros([C, C], dtype=tl.float32)
    for i_k in range(NK):
        o_k = i_k * BK + tl.arange(0, BK)
        g_cum, _ = _gate_cumsum(g_ptr, row, m_t, o_k, o_k < K, K, C)
        b_k = load_tile(k_ptr, row, m_t, o_k, K)
        b_dw = load_tile(dw_ptr, row, m_t, o_k, K)
        k_gated = b_k * tl.exp(g_cum.to(tl.float32)) * beta[:, None]
        d_tinv += tl.dot(b_dw, tl.trans(k_gated), input_precision=PREC)
        kk += tl.sum(b_k[:, None, :] * b_k[None, :, :] * _pair_decay(g_cum, strict), axis=2)
    for i_v in range(NV):
        o_v = i_v * BV + tl.arange(0, BV)
        b_v = load_tile(v_ptr, row, m_t, o_v, V)
        b_du = load_tile(dvn_ptr, row, m_t, o_v, V)
        d_tinv += tl.dot(b_du, tl.trans(b_v * beta[:, None]), input_precision=PREC)
    d_a = -tl.dot(tl.dot(tinv_t, d_tinv, input_precision=PREC), tinv_t, input_precision=PREC)
    d_a = tl.where(strict, d_a, 0.0)
    d_beta = tl.sum(d_a * kk, axis=1)
    d_m = d_a * beta[:, None]

    # Pass 2: dk and dg, tile by tile over K.
    suffix = (o_c[None, :] >= o_c[:, None])[:, :, None]
    for i_k in range(NK):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        g_cum, _ = _gate_cumsum(g_ptr, row, m_t, o_k, m_k, K, C)
        gamma = tl.exp(g_cum.to(tl.float32))
        b_k = load_tile(k_ptr, row, m_t, o_k, K)
        t_dw = tl.dot(tinv_t, load_tile(dw_ptr, row, m_t, o_k, K), input_precision=PREC)
        dk_w = t_dw * gamma * beta[:, None]
        decay = _pair_decay(g_cum, strict)
        dk_mrow = tl.sum(d_m[:, :, None] * b_k[None, :, :] * decay, axis=1)
        dk_mcol = tl.sum(d_m[:, :, None] * b_k[:, None, :] * decay, axis=0)
        b_dk = load_tile(dk_part_ptr, row, m_t, o_k, K) + dk_w + dk_mrow + dk_mcol
        d_gcum = load_tile(dg_part_ptr, row, m_t, o_k, K) + b_k * (dk_w + dk_mrow - dk_mcol)
        d_beta += tl.sum(t_dw * b_k * gamma, axis=1)
        b_dg = tl.sum(tl.where(suffix, d_gcum[None, :, :], 0.0), axis=1)
        m_tk = m_t[:, None] & m_k[None, :]
        tk_off = row[:, None] * K + o_k[None, :]
        tl.store(dk_ptr + tk_off, b_dk.to(dk_ptr.dtype.element_ty), mask=m_tk)
        tl.store(dg_ptr + tk_off, b_dg.to(dg_ptr.dtype.element_ty), mask=m_tk)
    for i_v in range(NV):
        o_v = i_v * BV + tl.arange(0, BV)
        b_v = load_tile(v_ptr, row, m_t, o_v, V)
        t_du = tl.dot(tinv_t, load_tile(dvn_ptr, row, m_t, o_v, V), input_precision=PREC)
        d_beta += tl.sum(t_du * b_v, axis=1)
        # Exact zeros as +0: in autograd of the recurrence the gradient of v (used once per
        # step, through a slice) is a sum that starts from zeros, so an exactly zero dv
        # (beta_t = +-0) is +0 there, whatever the sign of Tinv^T dU (EXC-02 judges zero
        # signs). A select, not "+ 0.0", which a compiler allowed to ignore zero signs could
        # drop (gdn's _wy_dkv_bwd_kernel does the same).
        b_dv = t_du * beta[:, None]
        store_tile(dv_ptr, row, m_t, o_v, V, tl.where(b_dv == 0.0, 0.0, b_dv))
    tl.store(dbeta_ptr + row, d_beta.to(dbeta_ptr.dtype.element_ty), mask=m_t)
