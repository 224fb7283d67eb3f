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
tl.dot precision ("ieee" for fp32 inputs, "tf32" for 16-bit ones, which reach these kernels
only with ``_precision.SIXTEEN_BIT_COMPUTE = "tf32"``: by default chunk.py passes 16-bit
inputs as fp32 copies, because TF32 rounding of the fp32 intermediates would put the fp32
outputs (the state, d dt, dA, dh0) outside the judge's bound, by up to 9x, 117x, 122x and 68x
in benchmarks/family_dot_precision.py's cases). No atomics: bitwise reproducible.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelgate.kernels._tiles import batch_head, chunk_rows, load_tile
from kernelgate.kernels.gdn.chunk_fwd import _decay, _load_gate_cumsum


@triton.jit
def _ssd_scan_start(
    init_ptr,
    state_ptr,
    scratch_ptr,
    i_bh,
    N: tl.constexpr,
    P: tl.constexpr,
    C: tl.constexpr,
    BN: tl.constexpr,
    BP: tl.constexpr,
    HAS_INIT: tl.constexpr,
):
    """How both scans (``_ssd_state_fwd_kernel`` and chunk_bwd's ``_ssd_state_bwd_kernel``)
    open: this program's [BN, BP] tile of one head's state (rows o_n, columns o_p = o_bp
    shifted), its own [C, BP] scratch, and the scan's starting tile stored at ``state_ptr``
    (the initial state, or the final state's gradient, from ``init_ptr`` if HAS_INIT, else
    zeros). Returns (o_n, o_p, o_bp, scratch)."""
    i_p = tl.program_id(0)
    i_nb = tl.program_id(1)
    o_bp = tl.arange(0, BP)
    o_n = i_nb * BN + tl.arange(0, BN)
    o_p = i_p * BP + o_bp
    m_np = (o_n < N)[:, None] & (o_p < P)[None, :]
    tile_off = o_n[:, None] * P + o_p[None, :]
    program = (i_bh.to(tl.int64) * tl.num_programs(1) + i_nb) * tl.num_programs(0) + i_p
    scratch = scratch_ptr + program * C * BP

    tile = tl.zeros([BN, BP], dtype=tl.float32)
    if HAS_INIT:
        tile += tl.load(init_ptr + i_bh.to(tl.int64) * N * P + tile_off, mask=m_np, other=0.0)
    tl.store(state_ptr + tile_off, tile, mask=m_np)
    return o_n, o_p, o_bp, scratch


@triton.jit(do_not_specialize=["NT"])
def _ssd_state_fwd_kernel(
    x_ptr,
    dt_ptr,
    b_ptr,
    gcum_ptr,
    h0_ptr,  # inputs
    h_ptr,
    ht_ptr,  # outputs (fp32): every chunk's entering state, the final state
    xs_ptr,  # scratch (fp32): this program's diag(exp(G_L - G) dt) X, [C, BP]
    T,
    NT,
    H: tl.constexpr,
    G: tl.constexpr,
    N: tl.constexpr,
    P: tl.constexpr,
    C: tl.constexpr,
    RC: tl.constexpr,
    BN: tl.constexpr,
    BP: tl.constexpr,
    HAS_H0: tl.constexpr,
    STORE_HT: tl.constexpr,
    PREC: tl.constexpr,
):
    """Sequential scan over chunks for one [BN, BP] tile of one head's state: stores H_n for
    every chunk n, H_{n+1} = exp(G_L) H_n + B^T diag(exp(G_L - G) dt) X.

    The state lives in the chunk-state buffer, not in registers, and the scaled X goes through
    this program's scratch: every dot reads both operands from memory and reduces over RC
    steps, the form that compiles without spills for fp32 on sm_90 (see gdn/chunk_fwd.py);
    CTA barriers order the steps."""
    i_bh = tl.program_id(2)
    i_b, i_h = batch_head(i_bh, H)
    i_g = i_h // (H // G)
    o_c = tl.arange(0, C)
    o_n, o_p, o_bp, scratch = _ssd_scan_start(
        h0_ptr, h_ptr + (i_b * NT * H + i_h) * N * P, xs_ptr, i_bh, N, P, C, BN, BP, HAS_H0
    )
    for i_c in range(0, NT):
        _t_idx, m_t, row = chunk_rows(i_b, i_h, i_c, T, H, C)
        g_cum, g_last = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_c, T, H, C)
        dt = tl.load(dt_ptr + row, mask=m_t, other=0.0).to(tl.float32)
        weight = tl.where(m_t, tl.exp((g_last - g_cum).to(tl.float32)), 0.0) * dt
        b_x = load_tile(x_ptr, row, m_t, o_p, P)
        tl.store(scratch + o_c[:, None] * BP + o_bp[None, :], b_x * weight[:, None])
        tl.debug_barrier()
        h_src = h_ptr + ((i_b * NT + i_c) * H + i_h) * N * P
        if i_c + 1 < NT:
            _ssd_state_update(
                b_ptr,
                scratch,
                h_src,
                h_src + H * N * P,
                g_last,
                i_b,
                i_g,
                i_c,
                T,
                o_n,
                o_p,
                G,
                N,
                P,
                C,
                RC,
                BN,
                BP,
                PREC,
            )
    if STORE_HT:  # the state after the last chunk, from what the last step left in scratch
        _, g_last = _load_gate_cumsum(gcum_ptr, i_b, i_h, NT - 1, T, H, C)
        _ssd_state_update(
            b_ptr,
            scratch,
            h_ptr + ((i_b * NT + NT - 1) * H + i_h) * N * P,
            ht_ptr + i_bh.to(tl.int64) * N * P,
            g_last,
            i_b,
            i_g,
            NT - 1,
            T,
            o_n,
            o_p,
            G,
            N,
            P,
            C,
            RC,
            BN,
            BP,
            PREC,
        )


@triton.jit
def _ssd_state_update(
    b_ptr,
    scratch,
    h_src,
    h_dst,
    g_last,
    i_b,
    i_g,
    i_c,
    T,
    o_n,
    o_p,
    G: tl.constexpr,
    N: tl.constexpr,
    P: tl.constexpr,
    C: tl.constexpr,
    RC: tl.constexpr,
    BN: tl.constexpr,
    BP: tl.constexpr,
    PREC: tl.constexpr,
):
    """h_dst = exp(G_L) h_src + B^T S for the [BN, BP] tile, S the scaled X left in
    ``scratch``, reducing over RC steps at a time; ends with a CTA barrier."""
    o_rc = tl.arange(0, RC)
    m_n = o_n < N
    m_np = m_n[:, None] & (o_p < P)[None, :]
    upd = tl.zeros([BN, BP], dtype=tl.float32)
    for j0 in range(0, C // RC):
        t_c = i_c * C + j0 * RC + o_rc
        b_bt = tl.load(
            b_ptr + ((i_b * T + t_c) * G + i_g)[None, :] * N + o_n[:, None],
            mask=m_n[:, None] & (t_c < T)[None, :],
            other=0.0,
        ).to(tl.float32)
        b_s = tl.load(scratch + (j0 * RC + o_rc)[:, None] * BP + tl.arange(0, BP)[None, :])
        upd += tl.dot(b_bt, b_s, input_precision=PREC)
    b_h = tl.load(h_src + o_n[:, None] * P + o_p[None, :], mask=m_np, other=0.0)
    chunk_decay = tl.exp(g_last.to(tl.float32))
    tl.store(h_dst + o_n[:, None] * P + o_p[None, :], b_h * chunk_decay + upd, mask=m_np)
    tl.debug_barrier()


@triton.jit(do_not_specialize=["NT", "N_END", "P_END"])  # a loop count of 1 must stay a loop
def _ssd_output_fwd_kernel(
    x_ptr,
    dt_ptr,
    b_ptr,
    c_ptr,
    d_ptr,
    gcum_ptr,
    h_ptr,  # inputs
    y_ptr,  # output, in x's dtype
    scores_ptr,  # scratch (fp32): (C B^T) * L * dt_j of this chunk, [C, C] per row
    T,
    NT,
    N_END,
    P_END,
    H: tl.constexpr,
    G: tl.constexpr,
    N: tl.constexpr,
    P: tl.constexpr,
    C: tl.constexpr,
    RC: tl.constexpr,
    RN: tl.constexpr,
    BP: tl.constexpr,
    HAS_D: tl.constexpr,
    PREC: tl.constexpr,
):
    """Y = ((C B^T) * L) Xdt + diag(exp(G)) C H_n + D_h X for one chunk and all of P.

    The decayed scores, with dt_j folded into column j, are built once, stored and read back
    in column blocks of RC, so every dot reads both operands from memory (see
    _ssd_state_fwd_kernel); ``N_END``, ``P_END`` (N and P rounded up to whole tiles) are
    runtime values so that a one-tile loop stays a loop (see gdn/chunk.py, _round_up)."""
    i_c = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_h = batch_head(i_bh, H)
    i_g = i_h // (H // G)
    o_c = tl.arange(0, C)
    o_rc = tl.arange(0, RC)
    t_idx, m_t, row = chunk_rows(i_b, i_h, i_c, T, H, C)  # rows of x, dt, y and the scores scratch
    bc_row = (i_b * T + t_idx) * G + i_g  # rows of B and C
    h_base = h_ptr + ((i_b * NT + i_c) * H + i_h) * N * P

    acc_cb = tl.zeros([C, C], dtype=tl.float32)  # C B^T
    for n0 in range(0, N_END, RN):
        o_n = n0 + tl.arange(0, RN)
        m_n = o_n < N
        b_c = load_tile(c_ptr, bc_row, m_t, o_n, N)
        b_bt = tl.load(
            b_ptr + bc_row[None, :] * N + o_n[:, None], mask=m_n[:, None] & m_t[None, :], other=0.0
        ).to(tl.float32)
        acc_cb += tl.dot(b_c, b_bt, input_precision=PREC)
    g_cum, _ = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_c, T, H, C)
    dt = tl.load(dt_ptr + row, mask=m_t, other=0.0).to(tl.float32)
    scores = acc_cb * _decay(g_cum, g_cum, o_c[:, None] >= o_c[None, :]) * dt[None, :]
    tl.store(scores_ptr + row[:, None] * C + o_c[None, :], scores, mask=m_t[:, None])
    tl.debug_barrier()

    gamma = tl.where(m_t, tl.exp(g_cum.to(tl.float32)), 0.0)
    for p0 in range(0, P_END, BP):
        o_p = p0 + tl.arange(0, BP)
        m_p = o_p < P
        acc_ch = tl.zeros([C, BP], dtype=tl.float32)  # C H_n
        for n0 in range(0, N_END, RN):
            o_n = n0 + tl.arange(0, RN)
            m_n = o_n < N
            b_c = load_tile(c_ptr, bc_row, m_t, o_n, N)
            b_h = load_tile(h_base, o_n, m_n, o_p, P)
            acc_ch += tl.dot(b_c, b_h, input_precision=PREC)
        acc_sx = tl.zeros([C, BP], dtype=tl.float32)  # scores (dt X)
        for j0 in range(0, C // RC):
            o_j = j0 * RC + o_rc
            b_s = tl.load(
                scores_ptr + row[:, None] * C + o_j[None, :], mask=m_t[:, None], other=0.0
            )
            b_x = tl.load(
                x_ptr + ((i_b * T + i_c * C + o_j) * H + i_h)[:, None] * P + o_p[None, :],
                mask=(i_c * C + o_j < T)[:, None] & m_p[None, :],
                other=0.0,
            ).to(tl.float32)
            acc_sx += tl.dot(b_s, b_x, input_precision=PREC)
        b_y = acc_sx + acc_ch * gamma[:, None]
        m_tp = m_t[:, None] & m_p[None, :]
        if HAS_D:
            b_x = tl.load(x_ptr + row[:, None] * P + o_p[None, :], mask=m_tp, other=0.0)
            b_y += tl.load(d_ptr + i_h).to(tl.float32) * b_x.to(tl.float32)
        tl.store(y_ptr + row[:, None] * P + o_p[None, :], b_y.to(y_ptr.dtype.element_ty), mask=m_tp)
