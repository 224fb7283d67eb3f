"""Register-resident chunk-parallel backward of Gated DeltaNet: three kernels, tf32x3, opt-in.

The derivation and notation are chunk_bwd.py's (read its module docstring first). The
shipped backward runs six kernels; the reverse state scan (``_state_bwd_kernel``) stays,
because the register form of the scan spills on sm_90 in tf32x3 under Triton 3.6 and 3.9
(docs/kernels/gdn.md, "Register-resident backward scan"). Its per-chunk (parallel) work,
four kernels plus the gate reduction, becomes three kernels whose dots take register
operands with ``input_precision="tf32x3"`` (as in chunk_fwd_fast.py), one program per
(chunk, batch * head), walking K and V in column tiles:

* ``_dqk_fast_kernel``: dS = scale (dO Vn^T) * decay * [j <= i] built once in registers (a
  loop over V tiles) and kept for every K tile, which then gets dq = dS K + scale
  diag(gamma) dO H^T and dW = -dVn H^T; a second K loop (dS^T the operand) gets the
  output/state part of dk = dS^T Q + diag(exp(G_L - G)) Vn dH^T. The gate terms of all K
  tiles are summed inside the program, K tiles in order, so one row of partials per chunk
  leaves it rather than one per K tile. Replaces ``_dscores_bwd_kernel`` and
  ``_qk_bwd_kernel``.
* ``_wy_da_fast_kernel``: dTinv, dA = -Tinv^T dTinv Tinv^T (strictly lower), P = dA * decay
  and K K^T in registers; the dbeta and dG terms of A; and (P' + P'^T) K (P' = diag(beta)
  P, one [C, C] operand instead of P' K + P'^T K's two) added to the dk rows.
* ``_wy_dkv_fast_kernel``: dk = those rows + diag(beta gamma) Tinv^T dW per K tile,
  dv = diag(beta) Tinv^T dU per V tile, then dbeta and dg (the reverse cumulative sum inside
  the chunk plus dG_L) from every partial. With the previous kernel replaces
  ``_wy_da_bwd_kernel``, ``_wy_dkv_bwd_kernel`` and ``_gate_bwd_kernel``.

Launches: 4 (scan + these three) instead of 6. No [C, C] scratch goes through global memory
(the staged kernels write dS, dTinv, K K^T, Tinv^T dTinv and P' per chunk).

Determinism: no atomics; every sum over tiles runs inside one program in a fixed order, so
gradients are bitwise reproducible for a launch configuration (the order differs from the
staged kernels', so the two agree to rounding, not bitwise). Numerics kept: every decay
factor is exp(fp32(G_i - G_j)) with the difference of the fp64 cumulative gates, as in the
staged kernels. The interpreter computes dots in fp32 whatever the precision, so CPU tests
check the algorithm, not the TF32 rounding, which needs the device.

Registers (offline sm_90, Triton 3.9 and 3.6, K = V = 128 and 64: 0 spill bytes, 96-255
registers; benchmarks/gdn_bwd_fast_resources.py, benchmarks/results/
gdn-bwd-fast-resources-cpu.json). What got there from the first drafts' 20-400 bytes of
spills: column tiles of 32 (64 spilled 100-1500 bytes); dS and dS^T never operands of one
loop; the WY backward split in two kernels (in one program, Tinv^T and P' + P'^T as
operands of the same tile loops spilled 4-200 bytes in every configuration tried); one
pipeline stage for the two heavy kernels (two: 8-150 bytes); runtime loop stops
(_RUNTIME_STOPS). ``_dqk_fast_kernel`` and ``_wy_da_fast_kernel`` sit at 249-255 registers
(column tiles of 16: 172-246, no spills, the fallback), so ptxas's choices can move with
small changes: rerun the resources script after any edit. Also spill-free at K = V = 256,
32 and (K, V) = (20, 24); and at head sizes that are not multiples of 4 (K = V = 31, 17,
33, 63, 65, 127; (31, 32), (1, 32), (32, 1)), whose rows load one element per instruction,
with the column tiles capped at 16 (chunk.fast_bwd_widths; with tiles of 32 the two heavy
kernels spilled 24-256 bytes there: benchmarks/results/gdn-bwd-fast-resources-sizes-cpu.json).
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelgate.kernels._tiles import batch_head, chunk_base
from kernelgate.kernels.gdn.chunk_fwd import _decay, _load_gate_cumsum

# _RUNTIME_STOPS: the tile loops stop at KP / VP (K and V padded to powers of two), runtime
# values, never constexprs. As constexprs, a head size of one tile (K = V <= 32) folded each
# loop into a bare dot and spilled on sm_90 (_wy_da_fast_kernel 36-256 bytes at K = V = 31 and
# 32, _dqk_fast_kernel 56-144 at 31), the effect chunk_bwd.py's _NO_SPECIALIZE describes.


@triton.jit(do_not_specialize=["T", "NT", "H", "KP", "VP"])  # see _RUNTIME_STOPS
def _dqk_fast_kernel(
    q_ptr,
    k_ptr,
    gcum_ptr,
    h_ptr,
    dh_ptr,
    vn_ptr,
    dvn_ptr,
    do_ptr,
    scores_ptr,  # inputs
    dq_ptr,  # output (its dtype): dq, final
    dk_part_ptr,
    dw_ptr,  # outputs (fp32, [B, T, H, K]): the output/state part of dk; dW
    dgcum_ptr,  # output (fp32, [B, T, H]): this kernel's dG terms, summed over K
    dglast_ptr,  # output (fp32, [B, NT, H]): this kernel's dG_L terms
    T,
    NT,
    H,
    scale,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    KP,
    VP,  # runtime loop stops: see the decorator
    BK: tl.constexpr,
    BV: tl.constexpr,
    PREC: tl.constexpr,
):
    """One chunk: dS in registers, then dq, dk (output/state part), dW per K tile of BK and
    the chunk's gate terms (sums over K tiles in order: no per-tile partial buffers)."""
    i_n = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_h = batch_head(i_bh, H)
    o_c = tl.arange(0, C)
    m_t, chunk_row = chunk_base(i_b, i_h, i_n, T, H, C)
    state_base = ((i_b * NT + i_n) * H + i_h).to(tl.int64) * K * V

    acc_dov = tl.zeros([C, C], dtype=tl.float32)  # dO Vn^T
    for v0 in range(0, VP, BV):
        o_v = v0 + tl.arange(0, BV)
        m_tv = m_t[:, None] & (o_v < V)[None, :]
        off_v = chunk_row * V + o_c[:, None] * (H * V) + o_v[None, :]
        b_do = tl.load(do_ptr + off_v, mask=m_tv, other=0.0).to(tl.float32)
        b_vn = tl.load(vn_ptr + off_v, mask=m_tv, other=0.0)
        acc_dov += tl.dot(b_do, tl.trans(b_vn), input_precision=PREC)
    g_cum, g_last = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H, C)
    b_p = tl.load(
        scores_ptr + chunk_row * C + o_c[:, None] * (H * C) + o_c[None, :],
        mask=m_t[:, None],
        other=0.0,
    )
    e = acc_dov * b_p * scale  # (gradient of the decayed score) x (decayed score)
    d_gcum = tl.sum(e, axis=1) - tl.sum(e, axis=0)
    d_s = acc_dov * _decay(g_cum, g_cum, o_c[:, None] >= o_c[None, :]) * scale

    gamma_scale = tl.where(m_t, tl.exp(g_cum.to(tl.float32)) * scale, 0.0)
    k_decay = tl.where(m_t, tl.exp((g_last - g_cum).to(tl.float32)), 0.0)
    d_glast = tl.zeros([BK], dtype=tl.float32)  # per key column, summed at the end
    for k0 in range(0, KP, BK):
        o_k = k0 + tl.arange(0, BK)
        m_k = o_k < K
        m_tk = m_t[:, None] & m_k[None, :]
        ck_off = chunk_row * K + o_c[:, None] * (H * K) + o_k[None, :]
        # dW = -dVn H^T and dO H^T share the loaded H^T tile
        acc_dw = tl.zeros([C, BK], dtype=tl.float32)
        acc_q = tl.zeros([C, BK], dtype=tl.float32)
        for v0 in range(0, VP, BV):
            o_v = v0 + tl.arange(0, BV)
            m_v = o_v < V
            m_tv = m_t[:, None] & m_v[None, :]
            off_v = chunk_row * V + o_c[:, None] * (H * V) + o_v[None, :]
            b_ht = tl.load(
                h_ptr + state_base + o_k[None, :] * V + o_v[:, None],
                mask=m_v[:, None] & m_k[None, :],
                other=0.0,
            )
            b_dvn = tl.load(dvn_ptr + off_v, mask=m_tv, other=0.0)
            acc_dw += tl.dot(b_dvn, b_ht, input_precision=PREC)
            b_do = tl.load(do_ptr + off_v, mask=m_tv, other=0.0).to(tl.float32)
            acc_q += tl.dot(b_do, b_ht, input_precision=PREC)
        tl.store(dw_ptr + ck_off, -acc_dw, mask=m_tk)
        b_k = tl.load(k_ptr + ck_off, mask=m_tk, other=0.0).to(tl.float32)
        dq_inter = acc_q * gamma_scale[:, None]
        b_dq = dq_inter + tl.dot(d_s, b_k, input_precision=PREC)
        tl.store(dq_ptr + ck_off, b_dq.to(dq_ptr.dtype.element_ty), mask=m_tk)
        b_q = tl.load(q_ptr + ck_off, mask=m_tk, other=0.0).to(tl.float32)
        d_gcum += tl.sum(b_q * dq_inter, axis=1)  # gamma_i's term
    # dS^T once, after the dq loop: only one of dS, dS^T is a live loop operand (with both
    # in one loop, the kernel spilled 100-400 bytes on sm_90)
    d_st = tl.trans(d_s)
    for k0 in range(0, KP, BK):
        o_k = k0 + tl.arange(0, BK)
        m_k = o_k < K
        m_tk = m_t[:, None] & m_k[None, :]
        ck_off = chunk_row * K + o_c[:, None] * (H * K) + o_k[None, :]
        # dk (output/state part) = diag(exp(G_L - G)) Vn dH_next^T + dS^T Q
        acc_k = tl.zeros([C, BK], dtype=tl.float32)
        acc_hdh = tl.zeros([BK], dtype=tl.float32)  # sum over V of H * dH_next
        for v0 in range(0, VP, BV):
            o_v = v0 + tl.arange(0, BV)
            m_v = o_v < V
            off_v = chunk_row * V + o_c[:, None] * (H * V) + o_v[None, :]
            b_vn = tl.load(vn_ptr + off_v, mask=m_t[:, None] & m_v[None, :], other=0.0)
            m_vk = m_v[:, None] & m_k[None, :]
            st_off = state_base + o_k[None, :] * V + o_v[:, None]
            b_dht = tl.load(dh_ptr + st_off, mask=m_vk, other=0.0)
            acc_k += tl.dot(b_vn, b_dht, input_precision=PREC)
            b_ht = tl.load(h_ptr + st_off, mask=m_vk, other=0.0)
            acc_hdh += tl.sum(b_ht * b_dht, axis=0)
        dk_state = acc_k * k_decay[:, None]
        b_q = tl.load(q_ptr + ck_off, mask=m_tk, other=0.0).to(tl.float32)
        b_dk = dk_state + tl.dot(d_st, b_q, input_precision=PREC)
        b_k = tl.load(k_ptr + ck_off, mask=m_tk, other=0.0).to(tl.float32)
        tl.store(dk_part_ptr + ck_off, b_dk, mask=m_tk)
        k_dk_state = tl.sum(b_k * dk_state, axis=1)
        d_gcum -= k_dk_state
        d_glast += tl.sum(b_k * dk_state, axis=0) + tl.exp(g_last.to(tl.float32)) * acc_hdh
    tl.store(dgcum_ptr + chunk_row + o_c * H, d_gcum, mask=m_t)
    tl.store(dglast_ptr + (i_b * NT + i_n) * H + i_h, tl.sum(d_glast, axis=0))


@triton.jit(do_not_specialize=["T", "H", "KP", "VP"])  # see _RUNTIME_STOPS
def _wy_da_fast_kernel(
    k_ptr,
    v_ptr,
    beta_ptr,
    gcum_ptr,
    ainv_ptr,
    dw_ptr,
    dvn_ptr,  # inputs
    dk_part_ptr,  # in and out (fp32, [B, T, H, K]): gains (P' + P'^T) K
    dbeta_a_ptr,
    dgcum_a_ptr,  # outputs (fp32, [B, T, H]): the dbeta and dG terms of A
    T,
    H,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    KP,
    VP,  # runtime loop stops: see the decorator
    BK: tl.constexpr,
    BV: tl.constexpr,
    PREC: tl.constexpr,
):
    """One chunk: back through Tinv = (I + A)^-1 and A = diag(beta) (K K^T) * decay in
    registers: dTinv, dA = -Tinv^T dTinv Tinv^T, P = dA * decay (strictly lower), the dbeta
    and dG terms of A, and (P' + P'^T) K added to the dk rows. A kernel of its own: with the
    Tinv^T loops of _wy_dkv_fast_kernel in the same program, every configuration tried
    spilled 4-200 bytes on sm_90 under one Triton or the other."""
    i_n = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_h = batch_head(i_bh, H)
    o_c = tl.arange(0, C)
    m_t, chunk_row = chunk_base(i_b, i_h, i_n, T, H, C)
    m_tt = m_t[:, None] & m_t[None, :]
    g_cum, _ = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H, C)
    beta = tl.load(beta_ptr + chunk_row + o_c * H, mask=m_t, other=0.0).to(tl.float32)
    beta_gamma = beta * tl.where(m_t, tl.exp(g_cum.to(tl.float32)), 0.0)

    # dTinv = dW (diag(beta gamma) K)^T + dU (diag(beta) V)^T
    d_tinv = tl.zeros([C, C], dtype=tl.float32)
    for k0 in range(0, KP, BK):
        o_k = k0 + tl.arange(0, BK)
        m_tk = m_t[:, None] & (o_k < K)[None, :]
        ck_off = chunk_row * K + o_c[:, None] * (H * K) + o_k[None, :]
        b_k = tl.load(k_ptr + ck_off, mask=m_tk, other=0.0).to(tl.float32)
        b_dw = tl.load(dw_ptr + ck_off, mask=m_tk, other=0.0)
        d_tinv += tl.dot(b_dw, tl.trans(b_k * beta_gamma[:, None]), input_precision=PREC)
    for v0 in range(0, VP, BV):
        o_v = v0 + tl.arange(0, BV)
        m_tv = m_t[:, None] & (o_v < V)[None, :]
        cv_off = chunk_row * V + o_c[:, None] * (H * V) + o_v[None, :]
        b_v = tl.load(v_ptr + cv_off, mask=m_tv, other=0.0).to(tl.float32) * beta[:, None]
        b_du = tl.load(dvn_ptr + cv_off, mask=m_tv, other=0.0)
        d_tinv += tl.dot(b_du, tl.trans(b_v), input_precision=PREC)
    # dA = -Tinv^T dTinv Tinv^T (strict lower); Tinv^T loaded through transposed addresses
    tinv_t = tl.load(
        ainv_ptr + chunk_row * C + o_c[None, :] * (H * C) + o_c[:, None], mask=m_tt, other=0.0
    )
    d_a = tl.dot(tl.dot(tinv_t, d_tinv, input_precision=PREC), tinv_t, input_precision=PREC)
    strict = o_c[:, None] > o_c[None, :]
    p = tl.where(strict, -d_a, 0.0) * _decay(g_cum, g_cum, strict)  # reaches beta_i (k_i . k_j)
    # A = diag(beta) (K K^T) * decay's terms; K K^T is built here, after dA, so it is never
    # live beside dTinv
    kk = tl.zeros([C, C], dtype=tl.float32)
    for k0 in range(0, KP, BK):
        o_k = k0 + tl.arange(0, BK)
        b_k = tl.load(
            k_ptr + chunk_row * K + o_c[:, None] * (H * K) + o_k[None, :],
            mask=m_t[:, None] & (o_k < K)[None, :],
            other=0.0,
        ).to(tl.float32)
        kk += tl.dot(b_k, tl.trans(b_k), input_precision=PREC)
    p_kk = p * kk
    d_beta = tl.sum(p_kk, axis=1)
    e = p_kk * beta[:, None]  # gradient reaching the decay, times the decay
    d_gcum = tl.sum(e, axis=1) - tl.sum(e, axis=0)
    # P' K + P'^T K = (P' + P'^T) K with P' = diag(beta) P: one [C, C] operand, not two,
    # added to the dk rows (this program's alone) for _wy_dkv_fast_kernel
    p_b = p * beta[:, None]
    p_sym = p_b + tl.trans(p_b)
    for k0 in range(0, KP, BK):
        o_k = k0 + tl.arange(0, BK)
        m_tk = m_t[:, None] & (o_k < K)[None, :]
        ck_off = chunk_row * K + o_c[:, None] * (H * K) + o_k[None, :]
        b_k = tl.load(k_ptr + ck_off, mask=m_tk, other=0.0).to(tl.float32)
        b_dk = tl.load(dk_part_ptr + ck_off, mask=m_tk, other=0.0)
        b_dk += tl.dot(p_sym, b_k, input_precision=PREC)
        tl.store(dk_part_ptr + ck_off, b_dk, mask=m_tk)
    tl.store(dbeta_a_ptr + chunk_row + o_c * H, d_beta, mask=m_t)
    tl.store(dgcum_a_ptr + chunk_row + o_c * H, d_gcum, mask=m_t)


@triton.jit(do_not_specialize=["T", "NT", "H", "KP", "VP"])  # see _RUNTIME_STOPS
def _wy_dkv_fast_kernel(
    k_ptr,
    v_ptr,
    beta_ptr,
    gcum_ptr,
    ainv_ptr,
    dw_ptr,
    dvn_ptr,
    dk_part_ptr,
    dbeta_a_ptr,
    dgcum_a_ptr,  # inputs (the last three from _wy_da_fast_kernel)
    dgcum_qk_ptr,
    dglast_ptr,  # inputs (from _dqk_fast_kernel)
    dk_ptr,
    dv_ptr,
    dbeta_ptr,
    dg_ptr,  # outputs, in their own dtypes
    T,
    NT,
    H,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    KP,
    VP,  # runtime loop stops: see the decorator
    BK: tl.constexpr,
    BV: tl.constexpr,
    PREC: tl.constexpr,
):
    """One chunk: dk = dk rows so far + diag(beta gamma) Tinv^T dW per K tile and
    dv = diag(beta) Tinv^T dU per V tile (Tinv^T the one register operand of both loops,
    the scales applied to the results), then the chunk's dbeta and dg from every partial,
    added in a fixed order."""
    i_n = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_h = batch_head(i_bh, H)
    o_c = tl.arange(0, C)
    m_t, chunk_row = chunk_base(i_b, i_h, i_n, T, H, C)
    m_tt = m_t[:, None] & m_t[None, :]
    g_cum, _ = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H, C)
    beta = tl.load(beta_ptr + chunk_row + o_c * H, mask=m_t, other=0.0).to(tl.float32)
    gamma = tl.where(m_t, tl.exp(g_cum.to(tl.float32)), 0.0)
    beta_gamma = beta * gamma
    d_beta = tl.load(dbeta_a_ptr + chunk_row + o_c * H, mask=m_t, other=0.0)
    d_gcum = tl.load(dgcum_a_ptr + chunk_row + o_c * H, mask=m_t, other=0.0)

    # dk = dk rows + diag(beta gamma) Tinv^T dW, per K tile
    tinv_t = tl.load(
        ainv_ptr + chunk_row * C + o_c[None, :] * (H * C) + o_c[:, None], mask=m_tt, other=0.0
    )
    for k0 in range(0, KP, BK):
        o_k = k0 + tl.arange(0, BK)
        m_tk = m_t[:, None] & (o_k < K)[None, :]
        ck_off = chunk_row * K + o_c[:, None] * (H * K) + o_k[None, :]
        b_dw = tl.load(dw_ptr + ck_off, mask=m_tk, other=0.0)
        acc = tl.dot(tinv_t, b_dw, input_precision=PREC)
        b_k = tl.load(k_ptr + ck_off, mask=m_tk, other=0.0).to(tl.float32)
        k_tdw = tl.sum(b_k * acc, axis=1)
        d_beta += gamma * k_tdw
        d_gcum += beta_gamma * k_tdw
        b_dk = tl.load(dk_part_ptr + ck_off, mask=m_tk, other=0.0) + acc * beta_gamma[:, None]
        tl.store(dk_ptr + ck_off, b_dk.to(dk_ptr.dtype.element_ty), mask=m_tk)
    # dv = diag(beta) Tinv^T dU, per V tile
    for v0 in range(0, VP, BV):
        o_v = v0 + tl.arange(0, BV)
        m_tv = m_t[:, None] & (o_v < V)[None, :]
        cv_off = chunk_row * V + o_c[:, None] * (H * V) + o_v[None, :]
        b_du = tl.load(dvn_ptr + cv_off, mask=m_tv, other=0.0)
        acc_v = tl.dot(tinv_t, b_du, input_precision=PREC)
        b_v = tl.load(v_ptr + cv_off, mask=m_tv, other=0.0).to(tl.float32)
        d_beta += tl.sum(b_v * acc_v, axis=1)
        # exact zeros as +0, as in chunk_bwd.py's _wy_dkv_bwd_kernel (EXC-02)
        b_dv = acc_v * beta[:, None]
        b_dv = tl.where(b_dv == 0.0, 0.0, b_dv)
        tl.store(dv_ptr + cv_off, b_dv.to(dv_ptr.dtype.element_ty), mask=m_tv)

    # dg_t = sum_{i >= t in the chunk} dG_i + dG_L (G_L is the sum of every g of the chunk)
    d_gcum += tl.load(dgcum_qk_ptr + chunk_row + o_c * H, mask=m_t, other=0.0)
    d_gcum = tl.where(m_t, d_gcum, 0.0)
    d_glast = tl.load(dglast_ptr + (i_b * NT + i_n) * H + i_h)
    suffix = o_c[:, None] <= o_c[None, :]
    d_g = tl.sum(tl.where(suffix, d_gcum[None, :], 0.0), axis=1) + d_glast
    tl.store(dbeta_ptr + chunk_row + o_c * H, d_beta.to(dbeta_ptr.dtype.element_ty), mask=m_t)
    tl.store(dg_ptr + chunk_row + o_c * H, d_g.to(dg_ptr.dtype.element_ty), mask=m_t)
