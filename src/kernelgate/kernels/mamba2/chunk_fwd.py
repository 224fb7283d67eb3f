"""Chunked forward of Mamba-2's SSD layer in Triton: inter-chunk state scan, then output.

Notation for one chunk of C steps of one (batch, head h in group g), positions i, j in [0, C):

* ``a_t = dt_t A_h`` is the per-step log decay, ``G_i`` its cumulative sum inside the chunk
  (float64, as in the Gated DeltaNet kernels: kernelgate.kernels.gdn.chunk_fwd), ``G_L`` the
  last valid step's G (padded tail steps carry a = 0 and dt = x = B = C = 0).
* ``Xdt = diag(dt) X`` (the written values), ``L_ij = exp(G_i - G_j) [j <= i]``.
* with ``H`` the state [N, P] entering the chunk:
  ``Y = ((C B^T) * L) Xdt + diag(exp(G)) C H + D_h X`` (intra-chunk masked decay attention
  plus the inter-chunk term) and ``H_next = exp(G_L) H + B^T diag(exp(G_L - G)) Xdt``.

The heads of a group read the same B and C rows (``g = h // (H // G)``); nothing is copied.

Two kernels: ``_ssd_state_fwd_kernel``, the only sequential part, one program per
(P tile, N tile, batch * head), walks the chunks and stores every chunk's entering state; its
[BN, BP] state tile is independent of every other tile (the update has no reduction over N or
P), so the scan is split over N as well as P. ``_ssd_output_fwd_kernel``, one program per
(P tile, chunk, batch * head), all chunks in parallel.

Numerics: every decay factor is ``exp(fp32(G_i - G_j))`` with the difference taken in float64
(see gdn/chunk_fwd.py for why fp32 cumulative sums are not enough at strong decays); inputs are
converted to fp32 on load, the states and every accumulation are fp32, and ``PREC`` picks the
tl.dot precision ("ieee" for fp32 inputs, "tf32" for 16-bit ones). No atomics: bitwise
reproducible.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelgate.kernels.gdn.chunk_fwd import _decay, _load_gate_cumsum


@triton.jit(do_not_specialize=["NT"])
def _ssd_state_fwd_kernel(
    x_ptr,
    dt_ptr,
    b_ptr,
    gcum_ptr,
    h0_ptr,  # inputs
    h_ptr,
    ht_ptr,  # outputs (fp32): every chunk's entering state, the final state
    T,
    NT,
    H: tl.constexpr,
    G: tl.constexpr,
    N: tl.constexpr,
    P: tl.constexpr,
    C: tl.constexpr,
    BN: tl.constexpr,
    BP: tl.constexpr,
    HAS_H0: tl.constexpr,
    STORE_HT: tl.constexpr,
    PREC: tl.constexpr,
):
    """Sequential scan over chunks for one [BN, BP] tile of one head's state:
    stores H_n for every chunk n, then H_{n+1} = exp(G_L) H_n + B^T diag(exp(G_L - G) dt) X."""
    i_p = tl.program_id(0)
    i_nb = tl.program_id(1)
    i_bh = tl.program_id(2)
    i_b = (i_bh // H).to(tl.int64)
    i_h = i_bh % H
    i_g = i_h // (H // G)
    o_c = tl.arange(0, C)
    o_n = i_nb * BN + tl.arange(0, BN)
    o_p = i_p * BP + tl.arange(0, BP)
    m_n = o_n < N
    m_p = o_p < P
    m_np = m_n[:, None] & m_p[None, :]
    tile_off = o_n[:, None] * P + o_p[None, :]

    state = tl.zeros([BN, BP], dtype=tl.float32)
    if HAS_H0:
        state += tl.load(h0_ptr + i_bh.to(tl.int64) * N * P + tile_off, mask=m_np, other=0.0)
    for i_c in range(0, NT):
        tl.store(h_ptr + ((i_b * NT + i_c) * H + i_h) * N * P + tile_off, state, mask=m_np)
        t_idx = i_c * C + o_c
        m_t = t_idx < T
        g_cum, g_last = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_c, T, H, C)
        dt = tl.load(dt_ptr + (i_b * T + t_idx) * H + i_h, mask=m_t, other=0.0).to(tl.float32)
        weight = tl.where(m_t, tl.exp((g_last - g_cum).to(tl.float32)), 0.0) * dt
        b_x = tl.load(
            x_ptr + ((i_b * T + t_idx) * H + i_h)[:, None] * P + o_p[None, :],
            mask=m_t[:, None] & m_p[None, :],
            other=0.0,
        ).to(tl.float32)
        b_bt = tl.load(
            b_ptr + ((i_b * T + t_idx) * G + i_g)[None, :] * N + o_n[:, None],
            mask=m_n[:, None] & m_t[None, :],
            other=0.0,
        ).to(tl.float32)
        chunk_decay = tl.exp(g_last.to(tl.float32))
        state = state * chunk_decay + tl.dot(b_bt, b_x * weight[:, None], input_precision=PREC)
    if STORE_HT:
        tl.store(ht_ptr + i_bh.to(tl.int64) * N * P + tile_off, state, mask=m_np)


@triton.jit(do_not_specialize=["NT"])
def _ssd_output_fwd_kernel(
    x_ptr,
    dt_ptr,
    b_ptr,
    c_ptr,
    d_ptr,
    gcum_ptr,
    h_ptr,  # inputs
    y_ptr,  # output, in x's dtype
    T,
    NT,
    H: tl.constexpr,
    G: tl.constexpr,
    N: tl.constexpr,
    P: tl.constexpr,
    C: tl.constexpr,
    BN: tl.constexpr,
    BP: tl.constexpr,
    HAS_D: tl.constexpr,
    PREC: tl.constexpr,
):
    """Y = ((C B^T) * L) Xdt + diag(exp(G)) C H_n + D_h X for one chunk and one P tile."""
    i_p = tl.program_id(0)
    i_c = tl.program_id(1)
    i_bh = tl.program_id(2)
    i_b = (i_bh // H).to(tl.int64)
    i_h = i_bh % H
    i_g = i_h // (H // G)
    o_c = tl.arange(0, C)
    o_p = i_p * BP + tl.arange(0, BP)
    m_p = o_p < P
    t_idx = i_c * C + o_c
    m_t = t_idx < T
    row = (i_b * T + t_idx) * H + i_h  # rows of x, dt, y
    bc_row = (i_b * T + t_idx) * G + i_g  # rows of B and C
    m_tp = m_t[:, None] & m_p[None, :]
    h_base = h_ptr + ((i_b * NT + i_c) * H + i_h) * N * P

    acc_cb = tl.zeros([C, C], dtype=tl.float32)  # C B^T
    acc_ch = tl.zeros([C, BP], dtype=tl.float32)  # C H_n
    for n0 in range(0, N, BN):
        o_n = n0 + tl.arange(0, BN)
        m_n = o_n < N
        b_c = tl.load(
            c_ptr + bc_row[:, None] * N + o_n[None, :], mask=m_t[:, None] & m_n[None, :], other=0.0
        ).to(tl.float32)
        b_bt = tl.load(
            b_ptr + bc_row[None, :] * N + o_n[:, None], mask=m_n[:, None] & m_t[None, :], other=0.0
        ).to(tl.float32)
        b_h = tl.load(
            h_base + o_n[:, None] * P + o_p[None, :], mask=m_n[:, None] & m_p[None, :], other=0.0
        )
        acc_cb += tl.dot(b_c, b_bt, input_precision=PREC)
        acc_ch += tl.dot(b_c, b_h, input_precision=PREC)
    g_cum, _ = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_c, T, H, C)
    scores = acc_cb * _decay(g_cum, g_cum, o_c[:, None] >= o_c[None, :])
    dt = tl.load(dt_ptr + row, mask=m_t, other=0.0).to(tl.float32)
    b_x = tl.load(x_ptr + row[:, None] * P + o_p[None, :], mask=m_tp, other=0.0).to(tl.float32)
    gamma = tl.where(m_t, tl.exp(g_cum.to(tl.float32)), 0.0)
    b_y = tl.dot(scores, b_x * dt[:, None], input_precision=PREC) + acc_ch * gamma[:, None]
    if HAS_D:
        b_y += tl.load(d_ptr + i_h).to(tl.float32) * b_x
    tl.store(y_ptr + row[:, None] * P + o_p[None, :], b_y.to(y_ptr.dtype.element_ty), mask=m_tp)
