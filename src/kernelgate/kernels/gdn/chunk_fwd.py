"""Chunked forward of Gated DeltaNet in Triton: WY representation, state scan, output.

Notation for one chunk of C steps of one (batch, head), positions i, j in [0, C):

* ``G_i``  = cumulative sum of g inside the chunk, ``gamma_i = exp(G_i)``, ``G_L`` = the
  last valid position's G (padded tail steps carry g = 0, so ``G_L`` = sum of g in the chunk).
* ``A``    = strict_lower(diag(beta) K K^T * exp(G_i - G_j)), ``Tinv = (I + A)^-1``.
* ``W``    = Tinv diag(beta * gamma) K, ``U = Tinv diag(beta) V``.
* with ``H`` the state entering the chunk: ``Vn = U - W H`` (the per-step deltas u_t),
  ``O = scale * (diag(gamma) Q H + (Q K^T * exp(G_i - G_j) * [j <= i]) Vn)`` and
  ``H_next = exp(G_L) H + (diag(exp(G_L - G)) K)^T Vn``.

Three kernels: ``_wy_fwd_kernel`` (one program per chunk, all chunks in parallel),
``_state_fwd_kernel`` (the only sequential part, one program per (batch, head, V block)),
``_output_fwd_kernel`` (one program per chunk and V block). Every intermediate that is
re-read (Tinv, W, U, Vn, the chunk states H) is kept in fp32; no atomics are used, so results
are bitwise reproducible. Inputs are loaded and converted to fp32, and ``PREC`` picks the
tl.dot precision: "ieee" for fp32 inputs (true fp32, also what the CPU interpreter does),
"tf32" for 16-bit inputs (bf16/fp16 values are exact in tf32; only fp32 intermediates round).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H: tl.constexpr, C: tl.constexpr):
    """The chunk's cumulative gates and the last valid one. Padded tail steps get G_L, so
    every exp(G_i - G_j) the kernels form stays finite and padded rows contribute nothing."""
    t_idx = i_n * C + tl.arange(0, C)
    m_t = t_idx < T
    last = tl.minimum(i_n * C + C, T) - 1
    g_last = tl.load(gcum_ptr + (i_b * T + last) * H + i_h)
    g_cum = tl.load(gcum_ptr + (i_b * T + t_idx) * H + i_h, mask=m_t, other=0.0)
    return tl.where(m_t, g_cum, g_last), g_last


@triton.jit
def _wy_fwd_kernel(
    k_ptr,
    v_ptr,
    g_ptr,
    beta_ptr,  # inputs
    gcum_ptr,
    ainv_ptr,
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
    """Per chunk: G = cumsum(g), Tinv = (I + A)^-1 by forward substitution, W and U."""
    i_n = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b = (i_bh // H).to(tl.int64)
    i_h = i_bh % H
    o_c = tl.arange(0, C)
    t_idx = i_n * C + o_c
    m_t = t_idx < T
    row = (i_b * T + t_idx) * H + i_h  # flat (b, t, h) index, int64

    g = tl.load(g_ptr + row, mask=m_t, other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + row, mask=m_t, other=0.0).to(tl.float32)
    g_cum = tl.cumsum(g, axis=0)
    tl.store(gcum_ptr + row, g_cum, mask=m_t)

    kk = tl.zeros([C, C], dtype=tl.float32)
    for i_k in range(NK):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        b_k = tl.load(
            k_ptr + row[:, None] * K + o_k[None, :], mask=m_t[:, None] & m_k[None, :], other=0.0
        ).to(tl.float32)
        kk += tl.dot(b_k, tl.trans(b_k), input_precision=PREC)

    strict = o_c[:, None] > o_c[None, :]
    # exp only of masked-in differences: above the diagonal G_i - G_j may overflow.
    decay = tl.exp(tl.where(strict, g_cum[:, None] - g_cum[None, :], 0.0))
    x = tl.where(strict, -(beta[:, None] * kk * decay), 0.0)
    # Forward substitution for Tinv = I + X: row i of X is -a_i - sum_{j<i} a_ij X_j, and the
    # rows j < i are already final when row i is built (X is strictly lower triangular).
    for i in range(1, C):
        sel = o_c == i
        x_i = tl.sum(tl.where(sel[:, None], x, 0.0), axis=0)
        x_i = x_i + tl.sum(x_i[:, None] * x, axis=0)
        x = tl.where(sel[:, None], x_i[None, :], x)
    tinv = x + tl.where(o_c[:, None] == o_c[None, :], 1.0, 0.0)
    tl.store(ainv_ptr + row[:, None] * C + o_c[None, :], tinv, mask=m_t[:, None])

    gamma = tl.exp(g_cum)
    for i_k in range(NK):
        o_k = i_k * BK + tl.arange(0, BK)
        m_k = o_k < K
        mask = m_t[:, None] & m_k[None, :]
        b_k = tl.load(k_ptr + row[:, None] * K + o_k[None, :], mask=mask, other=0.0).to(tl.float32)
        b_w = tl.dot(tinv, b_k * (beta * gamma)[:, None], input_precision=PREC)
        tl.store(w_ptr + row[:, None] * K + o_k[None, :], b_w, mask=mask)
    for i_v in range(NV):
        o_v = i_v * BV + tl.arange(0, BV)
        m_v = o_v < V
        mask = m_t[:, None] & m_v[None, :]
        b_v = tl.load(v_ptr + row[:, None] * V + o_v[None, :], mask=mask, other=0.0).to(tl.float32)
        b_u = tl.dot(tinv, b_v * beta[:, None], input_precision=PREC)
        tl.store(u_ptr + row[:, None] * V + o_v[None, :], b_u, mask=mask)


@triton.jit
def _state_fwd_kernel(
    k_ptr,
    w_ptr,
    u_ptr,
    gcum_ptr,
    h0_ptr,  # inputs
    h_ptr,
    vn_ptr,
    ht_ptr,  # outputs (fp32)
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
    """Sequential scan over chunks for one (batch, head, V block); stores every chunk's
    entering state H_n and the deltas Vn = U - W H_n."""
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

    state = tl.zeros([BK, BV], dtype=tl.float32)
    if HAS_H0:
        state += tl.load(h0_ptr + i_bh.to(tl.int64) * K * V + kv_off, mask=m_kv, other=0.0)
    for i_n in range(0, NT):
        t_idx = i_n * C + o_c
        m_t = t_idx < T
        row = (i_b * T + t_idx) * H + i_h
        tl.store(h_ptr + ((i_b * NT + i_n) * H + i_h) * K * V + kv_off, state, mask=m_kv)
        b_w = tl.load(
            w_ptr + row[:, None] * K + o_k[None, :], mask=m_t[:, None] & m_k[None, :], other=0.0
        )
        b_u = tl.load(
            u_ptr + row[:, None] * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :], other=0.0
        )
        b_vn = b_u - tl.dot(b_w, state, input_precision=PREC)
        tl.store(vn_ptr + row[:, None] * V + o_v[None, :], b_vn, mask=m_t[:, None] & m_v[None, :])
        b_k = tl.load(
            k_ptr + row[:, None] * K + o_k[None, :], mask=m_t[:, None] & m_k[None, :], other=0.0
        ).to(tl.float32)
        g_cum, g_last = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H, C)
        k_decay = tl.where(m_t, tl.exp(g_last - g_cum), 0.0)
        state = state * tl.exp(g_last) + tl.dot(
            tl.trans(b_k * k_decay[:, None]), b_vn, input_precision=PREC
        )
    if STORE_HT:
        tl.store(ht_ptr + i_bh.to(tl.int64) * K * V + kv_off, state, mask=m_kv)


@triton.jit
def _output_fwd_kernel(
    q_ptr,
    k_ptr,
    vn_ptr,
    gcum_ptr,
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
    PREC: tl.constexpr,
):
    """O = scale * (diag(gamma) Q H + (Q K^T * decay * [j <= i]) Vn) for one chunk and V block."""
    i_v = tl.program_id(0)
    i_n = tl.program_id(1)
    i_bh = tl.program_id(2)
    i_b = (i_bh // H).to(tl.int64)
    i_h = i_bh % H
    o_c = tl.arange(0, C)
    o_k = tl.arange(0, BK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_k = o_k < K
    m_v = o_v < V
    t_idx = i_n * C + o_c
    m_t = t_idx < T
    row = (i_b * T + t_idx) * H + i_h

    b_q = tl.load(
        q_ptr + row[:, None] * K + o_k[None, :], mask=m_t[:, None] & m_k[None, :], other=0.0
    ).to(tl.float32)
    b_k = tl.load(
        k_ptr + row[:, None] * K + o_k[None, :], mask=m_t[:, None] & m_k[None, :], other=0.0
    ).to(tl.float32)
    state = tl.load(
        h_ptr + ((i_b * NT + i_n) * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :],
        mask=m_k[:, None] & m_v[None, :],
        other=0.0,
    )
    b_vn = tl.load(
        vn_ptr + row[:, None] * V + o_v[None, :], mask=m_t[:, None] & m_v[None, :], other=0.0
    )
    g_cum, _ = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H, C)

    causal = o_c[:, None] >= o_c[None, :]
    decay = tl.where(causal, tl.exp(tl.where(causal, g_cum[:, None] - g_cum[None, :], 0.0)), 0.0)
    scores = tl.dot(b_q, tl.trans(b_k), input_precision=PREC) * decay
    b_o = tl.dot(b_q, state, input_precision=PREC) * tl.exp(g_cum)[:, None]
    b_o += tl.dot(scores, b_vn, input_precision=PREC)
    b_o *= scale
    tl.store(
        o_ptr + row[:, None] * V + o_v[None, :],
        b_o.to(o_ptr.dtype.element_ty),
        mask=m_t[:, None] & m_v[None, :],
    )
