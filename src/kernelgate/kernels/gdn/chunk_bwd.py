"""Chunked backward of Gated DeltaNet in Triton (notation as in chunk_fwd.py).

Reverse-mode derivation, per chunk with entering state H and upstream gradients dO and
dH_next (the gradient reaching the state that leaves the chunk), ``P = Q K^T * decay * [j <= i]``
the decayed scores the forward stored:

* ``dVn = scale * P^T dO + diag(exp(G_L - G)) K dH_next``
* ``dH  = exp(G_L) dH_next + scale * (diag(gamma) Q)^T dO - W^T dVn`` (reverse state scan)
* ``dS  = scale * (dO Vn^T) * decay * [j <= i]`` (the gradient of the raw Q K^T)
* ``dQ  = scale * diag(gamma) dO H^T + dS K``
* ``dK += dS^T Q + diag(exp(G_L - G)) Vn dH_next^T``; ``dW = -dVn H^T``, ``dU = dVn``
* WY part: ``dV = diag(beta) Tinv^T dU``, ``dK += diag(beta gamma) Tinv^T dW``,
  ``dTinv = dW (diag(beta gamma) K)^T + dU (diag(beta) V)^T``, ``dA = -Tinv^T dTinv Tinv^T``
  (strictly lower part), and A = diag(beta) (K K^T) * decay gives dK, dbeta and dG terms.
* every dependence on the gate goes through G; ``dg`` is the reverse cumulative sum of dG
  inside the chunk plus the gradient of G_L (which every step of the chunk feeds).

Four kernels: ``_state_bwd_kernel`` (reverse scan, one program per (batch, head, V block);
its state gradient lives in the chunk buffer like the forward scan's state, see chunk_fwd.py),
``_dscores_bwd_kernel`` (one program per chunk: dS, a sum over all of V, and its gate terms),
``_qk_bwd_kernel`` (one program per chunk and K block; loops over V blocks) and
``_wy_bwd_kernel`` (one program per chunk; loops over K and V blocks, sums the K-block
partials of the previous kernels in a fixed order and writes dk, dv, dbeta, dg). Partial
results go through fp32 scratch buffers, never atomics, so gradients are bitwise reproducible.
Decay factors come from the fp64 cumulative gates exactly as in the forward, and the dots keep
the same per-dot size limits (see chunk_fwd.py).
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelgate.kernels.gdn.chunk_fwd import _decay, _load_gate_cumsum


@triton.jit(do_not_specialize=["NT", "K_END"])  # a loop count of 1 must stay a loop
def _state_bwd_kernel(
    q_ptr,
    k_ptr,
    w_ptr,
    gcum_ptr,
    scores_ptr,
    do_ptr,
    dht_ptr,  # inputs
    dh_ptr,
    dvn_ptr,
    dh0_ptr,  # outputs (fp32)
    dog_ptr,  # scratch (fp32): this program's scale * diag(gamma) dO, [C, BV]
    T,
    NT,
    K_END,
    scale,
    H: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    RK: tl.constexpr,
    RC: tl.constexpr,
    BV: tl.constexpr,
    HAS_DHT: tl.constexpr,
    STORE_DH0: tl.constexpr,
    PREC: tl.constexpr,
):
    """Reverse scan: stores dH_next for every chunk and the complete gradient of Vn.

    Like the forward scan, the state gradient lives in its chunk buffer, not in registers:
    step n reads dH_next = dH[n] in row tiles of RK for dVn, writes dVn and
    scale diag(gamma) dO, then builds dH[n - 1] tile by tile; CTA barriers order the steps
    and every dot reads both operands from memory."""
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = (i_bh // H).to(tl.int64)
    i_h = i_bh % H
    o_c = tl.arange(0, C)
    o_rk = tl.arange(0, RK)
    o_rc = tl.arange(0, RC)
    o_bv = tl.arange(0, BV)
    o_v = i_v * BV + o_bv
    m_v = o_v < V
    scratch = dog_ptr + (i_bh.to(tl.int64) * tl.num_programs(0) + i_v) * C * BV

    last_base = dh_ptr + ((i_b * NT + NT - 1) * H + i_h) * K * V
    for k0 in range(0, K_END, RK):  # dH_next of the last chunk: the final state's gradient or zeros
        o_k = k0 + o_rk
        m_kv = (o_k < K)[:, None] & m_v[None, :]
        tile = tl.zeros([RK, BV], dtype=tl.float32)
        if HAS_DHT:
            tile += tl.load(
                dht_ptr + i_bh.to(tl.int64) * K * V + o_k[:, None] * V + o_v[None, :],
                mask=m_kv,
                other=0.0,
            )
        tl.store(last_base + o_k[:, None] * V + o_v[None, :], tile, mask=m_kv)
    tl.debug_barrier()
    for step in range(0, NT):
        i_n = NT - 1 - step
        m_t = i_n * C + o_c < T
        chunk_row = (i_b * T + i_n * C) * H + i_h
        m_tv = m_t[:, None] & m_v[None, :]
        dh_base = dh_ptr + ((i_b * NT + i_n) * H + i_h) * K * V
        g_cum, g_last = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H, C)

        acc_kdh = tl.zeros([C, BV], dtype=tl.float32)  # K dH_next
        for k0 in range(0, K_END, RK):
            o_k = k0 + o_rk
            m_k = o_k < K
            b_k = tl.load(
                k_ptr + chunk_row * K + o_c[:, None] * (H * K) + o_k[None, :],
                mask=m_t[:, None] & m_k[None, :],
                other=0.0,
            ).to(tl.float32)
            b_dh = tl.load(
                dh_base + o_k[:, None] * V + o_v[None, :],
                mask=m_k[:, None] & m_v[None, :],
                other=0.0,
            )
            acc_kdh += tl.dot(b_k, b_dh, input_precision=PREC)
        acc_pdo = tl.zeros([C, BV], dtype=tl.float32)  # P^T dO
        for i_c in range(0, C // RC):
            o_i = i_c * RC + o_rc
            b_pt = tl.load(
                scores_ptr + chunk_row * C + o_i[None, :] * (H * C) + o_c[:, None],
                mask=(i_n * C + o_i < T)[None, :],
                other=0.0,
            )
            b_do = tl.load(
                do_ptr + chunk_row * V + o_i[:, None] * (H * V) + o_v[None, :],
                mask=(i_n * C + o_i < T)[:, None] & m_v[None, :],
                other=0.0,
            ).to(tl.float32)
            acc_pdo += tl.dot(b_pt, b_do, input_precision=PREC)
        k_decay = tl.where(m_t, tl.exp((g_last - g_cum).to(tl.float32)), 0.0)
        b_dvn = acc_kdh * k_decay[:, None] + acc_pdo * scale
        tl.store(dvn_ptr + chunk_row * V + o_c[:, None] * (H * V) + o_v[None, :], b_dvn, mask=m_tv)
        b_do = tl.load(
            do_ptr + chunk_row * V + o_c[:, None] * (H * V) + o_v[None, :], mask=m_tv, other=0.0
        ).to(tl.float32)
        gamma_scale = tl.exp(g_cum.to(tl.float32)) * scale
        tl.store(scratch + o_c[:, None] * BV + o_bv[None, :], b_do * gamma_scale[:, None])
        tl.debug_barrier()
        if i_n > 0:
            _state_bwd_update(
                q_ptr,
                w_ptr,
                dvn_ptr,
                scratch,
                dh_base,
                dh_base - H * K * V,
                chunk_row,
                i_n,
                T,
                K_END,
                tl.exp(g_last.to(tl.float32)),
                o_v,
                H,
                K,
                V,
                C,
                RK,
                RC,
                BV,
                PREC,
            )
    if STORE_DH0:  # chunk 0's update, from what its step left in memory, is d initial_state
        _, g_last0 = _load_gate_cumsum(gcum_ptr, i_b, i_h, 0, T, H, C)
        _state_bwd_update(
            q_ptr,
            w_ptr,
            dvn_ptr,
            scratch,
            dh_ptr + (i_b * NT * H + i_h) * K * V,
            dh0_ptr + i_bh.to(tl.int64) * K * V,
            i_b * T * H + i_h,
            0,
            T,
            K_END,
            tl.exp(g_last0.to(tl.float32)),
            o_v,
            H,
            K,
            V,
            C,
            RK,
            RC,
            BV,
            PREC,
        )


@triton.jit
def _state_bwd_update(
    q_ptr,
    w_ptr,
    dvn_ptr,
    scratch,
    src,
    dst,
    chunk_row,
    i_n,
    T,
    K_END,
    chunk_decay,
    o_v,
    H: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    RK: tl.constexpr,
    RC: tl.constexpr,
    BV: tl.constexpr,
    PREC: tl.constexpr,
):
    """dst = exp(G_L) src + Q^T (scale diag(gamma) dO) - W^T dVn, in row tiles of RK and
    reducing over RC steps at a time; ends with a CTA barrier."""
    o_rk = tl.arange(0, RK)
    o_rc = tl.arange(0, RC)
    o_bv = tl.arange(0, BV)
    m_v = o_v < V
    for k0 in range(0, K_END, RK):
        o_k = k0 + o_rk
        m_k = o_k < K
        acc_q = tl.zeros([RK, BV], dtype=tl.float32)
        acc_w = tl.zeros([RK, BV], dtype=tl.float32)
        for i_c in range(0, C // RC):
            o_i = i_c * RC + o_rc
            m_i = i_n * C + o_i < T
            b_qt = tl.load(
                q_ptr + chunk_row * K + o_i[None, :] * (H * K) + o_k[:, None],
                mask=m_k[:, None] & m_i[None, :],
                other=0.0,
            ).to(tl.float32)
            b_dog = tl.load(scratch + o_i[:, None] * BV + o_bv[None, :])
            acc_q += tl.dot(b_qt, b_dog, input_precision=PREC)
            b_wt = tl.load(
                w_ptr + chunk_row * K + o_i[None, :] * (H * K) + o_k[:, None],
                mask=m_k[:, None] & m_i[None, :],
                other=0.0,
            )
            b_dvn = tl.load(
                dvn_ptr + chunk_row * V + o_i[:, None] * (H * V) + o_v[None, :],
                mask=m_i[:, None] & m_v[None, :],
                other=0.0,
            )
            acc_w += tl.dot(b_wt, b_dvn, input_precision=PREC)
        m_kv = m_k[:, None] & m_v[None, :]
        b_dh = tl.load(src + o_k[:, None] * V + o_v[None, :], mask=m_kv, other=0.0)
        tl.store(
            dst + o_k[:, None] * V + o_v[None, :], b_dh * chunk_decay + acc_q - acc_w, mask=m_kv
        )
    tl.debug_barrier()


@triton.jit
def _dscores_bwd_kernel(
    do_ptr,
    vn_ptr,
    scores_ptr,
    gcum_ptr,  # inputs
    dscores_ptr,
    dgcum_ptr,  # outputs (fp32)
    T,
    scale,
    H: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BV: tl.constexpr,
    NV: tl.constexpr,
    PREC: tl.constexpr,
):
    """dS = scale * (dO Vn^T) * decay * [j <= i] for one chunk (a sum over all of V, computed
    once here rather than in every K block of _qk_bwd_kernel), and its gate terms: each
    decay factor exp(G_i - G_j) sends (gradient x value) to dG_i and its negative to dG_j."""
    i_n = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = (i_bh // H).to(tl.int64)
    i_h = i_bh % H
    o_c = tl.arange(0, C)
    t_idx = i_n * C + o_c
    m_t = t_idx < T
    row = (i_b * T + t_idx) * H + i_h

    acc_dov = tl.zeros([C, C], dtype=tl.float32)  # dO Vn^T
    for i_v in range(NV):
        o_v = i_v * BV + tl.arange(0, BV)
        m_tv = m_t[:, None] & (o_v < V)[None, :]
        b_do = tl.load(do_ptr + row[:, None] * V + o_v[None, :], mask=m_tv, other=0.0).to(
            tl.float32
        )
        b_vn = tl.load(vn_ptr + row[:, None] * V + o_v[None, :], mask=m_tv, other=0.0)
        acc_dov += tl.dot(b_do, tl.trans(b_vn), input_precision=PREC)
    b_p = tl.load(scores_ptr + row[:, None] * C + o_c[None, :], mask=m_t[:, None], other=0.0)
    g_cum, _ = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H, C)

    d_scores = acc_dov * _decay(g_cum, g_cum, o_c[:, None] >= o_c[None, :]) * scale
    tl.store(dscores_ptr + row[:, None] * C + o_c[None, :], d_scores, mask=m_t[:, None])
    e = acc_dov * b_p * scale  # (gradient of the decayed score) x (decayed score)
    d_gcum = tl.sum(e, axis=1) - tl.sum(e, axis=0)
    tl.store(dgcum_ptr + row, d_gcum, mask=m_t)


@triton.jit
def _qk_bwd_kernel(
    q_ptr,
    k_ptr,
    gcum_ptr,
    h_ptr,
    dh_ptr,
    vn_ptr,
    dvn_ptr,
    do_ptr,
    dscores_ptr,  # inputs
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
        acc_hdh += tl.sum(b_h * b_dh, axis=1)

    b_q = tl.load(q_ptr + row[:, None] * K + o_k[None, :], mask=m_tk, other=0.0).to(tl.float32)
    b_k = tl.load(k_ptr + row[:, None] * K + o_k[None, :], mask=m_tk, other=0.0).to(tl.float32)
    d_scores = tl.load(dscores_ptr + row[:, None] * C + o_c[None, :], mask=m_t[:, None], other=0.0)
    g_cum, g_last = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H, C)

    dq_inter = acc_dq * (tl.exp(g_cum.to(tl.float32)) * scale)[:, None]
    b_dq = tl.dot(d_scores, b_k, acc=dq_inter, input_precision=PREC)
    k_decay = tl.where(m_t, tl.exp((g_last - g_cum).to(tl.float32)), 0.0)
    dk_state = acc_dk * k_decay[:, None]
    b_dk = tl.dot(tl.trans(d_scores), b_q, acc=dk_state, input_precision=PREC)
    tl.store(dq_ptr + row[:, None] * K + o_k[None, :], b_dq.to(dq_ptr.dtype.element_ty), mask=m_tk)
    tl.store(dk_part_ptr + row[:, None] * K + o_k[None, :], b_dk, mask=m_tk)
    tl.store(dw_ptr + row[:, None] * K + o_k[None, :], -acc_dw, mask=m_tk)

    # Gate terms (partial over this K block): dG_i gets q_i . dq_inter_i (gamma_i) and
    # -k_j . dk_state_j (exp(G_L - G_j)); G_L gets the latter's sum and exp(G_L) H . dH_next.
    k_dk_state = tl.sum(b_k * dk_state, axis=1)
    d_gcum = tl.sum(b_q * dq_inter, axis=1) - k_dk_state
    d_glast = tl.sum(k_dk_state, axis=0) + tl.exp(g_last.to(tl.float32)) * tl.sum(acc_hdh, axis=0)
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
    dgcum_scores_ptr,
    dgcum_part_ptr,
    dglast_part_ptr,  # inputs (gate partials of the previous kernels)
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
    gamma = tl.where(m_t, tl.exp(g_cum.to(tl.float32)), 0.0)
    tinv = tl.load(ainv_ptr + row[:, None] * C + o_c[None, :], mask=m_t[:, None], other=0.0)

    # Pass 1: dTinv and K K^T.
    d_tinv = tl.zeros([C, C], dtype=tl.float32)
    kk = tl.zeros([C, C], dtype=tl.float32)
    for i_k in range(NK):
        o_k = i_k * BK + tl.arange(0, BK)
        m_tk = m_t[:, None] & (o_k < K)[None, :]
        b_k = tl.load(k_ptr + row[:, None] * K + o_k[None, :], mask=m_tk, other=0.0).to(tl.float32)
        b_dw = tl.load(dw_ptr + row[:, None] * K + o_k[None, :], mask=m_tk, other=0.0)
        d_tinv += tl.dot(b_dw, tl.trans(b_k), input_precision=PREC)
        kk += tl.dot(b_k, tl.trans(b_k), input_precision=PREC)
    d_tinv = d_tinv * (beta * gamma)[None, :]  # the columns of dW (diag(beta gamma) K)^T
    for i_v in range(NV):
        o_v = i_v * BV + tl.arange(0, BV)
        m_tv = m_t[:, None] & (o_v < V)[None, :]
        b_v = tl.load(v_ptr + row[:, None] * V + o_v[None, :], mask=m_tv, other=0.0).to(tl.float32)
        b_du = tl.load(dvn_ptr + row[:, None] * V + o_v[None, :], mask=m_tv, other=0.0)
        d_tinv += tl.dot(b_du, tl.trans(b_v * beta[:, None]), input_precision=PREC)

    strict = o_c[:, None] > o_c[None, :]
    tinv_t = tl.trans(tinv)
    d_a = -tl.dot(tl.dot(tinv_t, d_tinv, input_precision=PREC), tinv_t, input_precision=PREC)
    p = tl.where(strict, d_a, 0.0) * _decay(g_cum, g_cum, strict)  # reaches beta_i (k_i . k_j)
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
        b_dk = tl.dot(p_beta, b_k, acc=b_dk, input_precision=PREC)
        b_dk = tl.dot(tl.trans(p_beta), b_k, acc=b_dk, input_precision=PREC)
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

    # Gate partials of the other kernels, summed in a fixed order.
    d_gcum += tl.load(dgcum_scores_ptr + row, mask=m_t, other=0.0)
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
