"""Chunked backward of Mamba-2's SSD layer in Triton (notation as in chunk_fwd.py).

Reverse-mode derivation, per chunk with entering state H, upstream gradients dY and dH_next
(the gradient reaching the state that leaves the chunk), ``S = (C B^T) * L``:

* reverse state scan: ``dH = exp(G_L) dH_next + C^T diag(exp(G)) dY``, from the final
  state's gradient; what reaches chunk 0's entering state is d initial_state;
* ``dXdt = S^T dY + diag(exp(G_L - G)) B dH_next``, so ``dX = diag(dt) dXdt + D_h dY`` and
  the direct part of d dt is the row sums of ``X * dXdt``;
* with ``dSL = (dY Xdt^T) * L`` (the gradient of C B^T): ``dC = dSL B + diag(exp(G)) dY H^T``
  and ``dB = dSL^T C + diag(exp(G_L - G)) Xdt dH_next^T``, per head (the heads of a group
  are summed afterwards, in a fixed order);
* gate: the log decay a_t of a chunk step enters ``exp(G_i - G_j)`` for the pairs
  j < t <= i, ``exp(G_i)`` for i >= t, ``exp(G_L - G_j)`` for j < t and ``exp(G_L)``, so
  ``da_t = sum_{i >= t, j < t} e_ij + sum_{i >= t} C_i . dC_inter_i
  + sum_{j < t} Xdt_j . dXdt_state_j + exp(G_L) <H, dH_next>`` with ``e = (dY Xdt^T) * S``
  (gradient x value of each factor). Summed this way, not as the reverse cumulative sum of
  per-position terms (+e_ij at i, -e_ij at j), whose pairs on one side of t cancel only up
  to fp32 rounding (that made dA 20-80x less accurate than the fp32 recurrence's).
  From ``a = dt A``: ``d dt += A_h da`` and ``dA_h = sum dt da`` (in the torch wrapper).

Sums over P: ``dY X^T`` (in dSL and e; formed by the wrapper, chunk.py ``_chunk_dy_x``), the
row sums of ``X * dXdt`` (direct d dt and the state term of da) and ``<H, dH_next>`` add
float64 products of the fp32 values and round to fp32 once. In fp32, x rows holding +-2^24
beside values below 1 (the backward contract's ORD-01 "cancel-ends" pattern) cancelled to
multiples of 2 and dropped the small terms, which are all that is left: dA was 72,509 off on
a true 77,751 (1.03x the contract's bound, 16x the fp32 recurrence's error of 4,434, which
meets the cancellation later). fp32 products are exact in float64. In the kernel, ``dY X^T``
as a float64 dot spilled on sm_90 under Triton 3.9 (48 bytes as one [C, C] tile, 40-60 as
[C, RC] column blocks), hence the wrapper. ``dY H^T`` (the inter-chunk part of dC and da)
stays fp32: as a float64 dot it spilled 40 bytes under 3.9 beside the dC and dB accumulators
and 32 under 3.6 in a P loop of its own; on that pattern its fp32 sum leaves dA 261 off
(bound 70,946) and d dt 111 (bound 5,382).

Two kernels: ``_ssd_state_bwd_kernel`` (reverse scan, one program per (P tile, N tile,
batch * head), built like the forward scan) and ``_ssd_chunk_bwd_kernel`` (one program per
(chunk, batch * head), all of N and P in tiles). No atomics; every partial goes through a
buffer and is summed in a fixed order, so gradients are bitwise reproducible.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelgate.kernels._tiles import batch_head, chunk_rows, load_tile
from kernelgate.kernels.gdn.chunk_fwd import _decay, _load_gate_cumsum
from kernelgate.kernels.mamba2.chunk_fwd import _ssd_scan_start, _ssd_state_update


@triton.jit(do_not_specialize=["NT"])
def _ssd_state_bwd_kernel(
    c_ptr,
    gcum_ptr,
    dy_ptr,
    dht_ptr,  # inputs
    dh_ptr,
    dh0_ptr,  # outputs (fp32): every chunk's dH_next, d initial_state
    dys_ptr,  # scratch (fp32): this program's diag(exp(G)) dY, [C, BP]
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
    HAS_DHT: tl.constexpr,
    STORE_DH0: tl.constexpr,
    PREC: tl.constexpr,
):
    """Reverse scan for one [BN, BP] tile of one head's state gradient: stores dH_next of
    every chunk, dH = exp(G_L) dH_next + C^T diag(exp(G)) dY. Like the forward scan, the
    gradient lives in its chunk buffer and the scaled dY goes through scratch, so every dot
    reads both operands from memory (the forward's state update, with C in place of B)."""
    i_bh = tl.program_id(2)
    i_b, i_h = batch_head(i_bh, H)
    i_g = i_h // (H // G)
    o_c = tl.arange(0, C)
    o_n, o_p, o_bp, scratch = _ssd_scan_start(
        dht_ptr,
        dh_ptr + ((i_b * NT + NT - 1) * H + i_h) * N * P,
        dys_ptr,
        i_bh,
        N,
        P,
        C,
        BN,
        BP,
        HAS_DHT,
    )
    for step in range(0, NT):
        i_c = NT - 1 - step
        _t_idx, m_t, row = chunk_rows(i_b, i_h, i_c, T, H, C)
        g_cum, g_last = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_c, T, H, C)
        gamma = tl.where(m_t, tl.exp(g_cum.to(tl.float32)), 0.0)
        b_dy = load_tile(dy_ptr, row, m_t, o_p, P)
        tl.store(scratch + o_c[:, None] * BP + o_bp[None, :], b_dy * gamma[:, None])
        tl.debug_barrier()
        dh_src = dh_ptr + ((i_b * NT + i_c) * H + i_h) * N * P
        if i_c > 0:
            _ssd_state_update(
                c_ptr,
                scratch,
                dh_src,
                dh_src - H * N * P,
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
    if STORE_DH0:  # chunk 0's update, from what its step left in scratch
        _, g_last0 = _load_gate_cumsum(gcum_ptr, i_b, i_h, 0, T, H, C)
        _ssd_state_update(
            c_ptr,
            scratch,
            dh_ptr + (i_b * NT * H + i_h) * N * P,
            dh0_ptr + i_bh.to(tl.int64) * N * P,
            g_last0,
            i_b,
            i_g,
            0,
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


@triton.jit(do_not_specialize=["NT", "N_END", "P_END"])  # a loop count of 1 must stay a loop
def _ssd_chunk_bwd_kernel(
    x_ptr,
    dt_ptr,
    b_ptr,
    c_ptr,
    d_ptr,
    gcum_ptr,
    h_ptr,
    dh_ptr,
    dy_ptr,
    dyx_ptr,  # inputs; dyx: dY X^T of each chunk (fp32, summed in fp64), [C, C] per row
    dx_ptr,  # output, in x's dtype
    ddt_ptr,
    dg_ptr,
    db_ptr,
    dc_ptr,  # outputs (fp32): direct d dt, d a, per-head dB and dC
    s_ptr,
    ds_ptr,  # scratch (fp32): this chunk's S and dSL, [C, C] per row like the outputs
    cs_ptr,  # output (fp32): the row prefix sums of the gate terms, [C, C] per row
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
    """Every gradient of one chunk of one head: dX, the direct part of d dt, the per-head
    dB and dC, and d a.

    Built like the forward kernels (see chunk_fwd.py): S and dSL are formed once, stored, and
    read back (also transposed, through the pointers) in column blocks of RC, so every dot
    reads both operands from memory and reduces over at most RC = RN steps or channels; dt
    scales dot results, never dot operands. ``N_END``, ``P_END`` are N and P rounded up to
    whole tiles, runtime values so that a one-tile loop stays a loop."""
    i_c = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_h = batch_head(i_bh, H)
    i_g = i_h // (H // G)
    o_c = tl.arange(0, C)
    o_rc = tl.arange(0, RC)
    o_rn = tl.arange(0, RN)
    # row: rows of x, dt, y, the scratch and per-head outputs
    t_idx, m_t, row = chunk_rows(i_b, i_h, i_c, T, H, C)
    bc_row = (i_b * T + t_idx) * G + i_g  # rows of B and C
    state_base = ((i_b * NT + i_c) * H + i_h) * N * P

    dt = tl.load(dt_ptr + row, mask=m_t, other=0.0).to(tl.float32)
    g_cum, g_last = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_c, T, H, C)
    gamma = tl.where(m_t, tl.exp(g_cum.to(tl.float32)), 0.0)
    to_end = tl.where(m_t, tl.exp((g_last - g_cum).to(tl.float32)), 0.0)
    chunk_decay = tl.exp(g_last.to(tl.float32))

    # dSL = (dY Xdt^T) * L from dY X^T, which the wrapper sums over P in fp64 (see "Sums over
    # P" in the module docstring); stored for the dots below.
    decay = _decay(g_cum, g_cum, o_c[:, None] >= o_c[None, :])
    b_dyx = tl.load(dyx_ptr + row[:, None] * C + o_c[None, :], mask=m_t[:, None], other=0.0)
    d_s = b_dyx * dt[None, :]  # dY Xdt^T: the gradient of S
    tl.store(ds_ptr + row[:, None] * C + o_c[None, :], d_s * decay, mask=m_t[:, None])
    # S = (C B^T) * L, stored for the dots below.
    acc_cb = tl.zeros([C, C], dtype=tl.float32)
    for n0 in range(0, N_END, RN):
        o_n = n0 + o_rn
        m_n = o_n < N
        b_c = load_tile(c_ptr, bc_row, m_t, o_n, N)
        b_bt = tl.load(
            b_ptr + bc_row[None, :] * N + o_n[:, None], mask=m_n[:, None] & m_t[None, :], other=0.0
        ).to(tl.float32)
        acc_cb += tl.dot(b_c, b_bt, input_precision=PREC)
    scores = acc_cb * decay
    tl.store(s_ptr + row[:, None] * C + o_c[None, :], scores, mask=m_t[:, None])
    # a_t enters exp(G_i - G_j) for the pairs j < t <= i: gather e_ij = dS_ij S_ij over them
    # (see the module docstring for why not a reverse cumsum of per-position terms).
    # The prefix sums over j < t are the inclusive ones of column t - 1: stored here, shifted
    # and summed over i >= t by the torch wrapper (chunk.py, _gate_pair_sums). Inclusive minus
    # e_it instead cancels e_it, which can be the chunk's largest term (e_tt is undecayed,
    # e_it for i > t decays only from t + 1 on), against itself: dA was then up to 300x less
    # accurate than the fp32 recurrence's where exp(a_t) is small (integer-valued inputs, dt
    # in {0, 1}: the backward contract's CMP-01 rejected it, examples/mamba2_backward).
    # Done in the kernel, the shift spilled on sm_90 (Triton 3.9):
    # a dot with a triangle of ones ~300 bytes, a shifted reload 28-52 bytes.
    e = d_s * scores
    tl.store(cs_ptr + row[:, None] * C + o_c[None, :], tl.cumsum(e, axis=1), mask=m_t[:, None])
    tl.debug_barrier()

    # Per P tile: dXdt = S^T dY + diag(exp(G_L - G)) B dH_next -> dX, d dt.
    through_state = tl.zeros([C], dtype=tl.float64)  # what exp(G_L - G_j) passes on
    d_dt = tl.zeros([C], dtype=tl.float64)
    for p0 in range(0, P_END, BP):
        o_p = p0 + tl.arange(0, BP)
        m_p = o_p < P
        m_tp = m_t[:, None] & m_p[None, :]
        acc_sdy = tl.zeros([C, BP], dtype=tl.float32)  # S^T dY
        for j0 in range(0, C // RC):
            o_j = j0 * RC + o_rc
            row_j = (i_b * T + i_c * C + o_j) * H + i_h
            m_j = i_c * C + o_j < T
            b_st = tl.load(s_ptr + row_j[None, :] * C + o_c[:, None], mask=m_j[None, :], other=0.0)
            b_dy = load_tile(dy_ptr, row_j, m_j, o_p, P)
            acc_sdy += tl.dot(b_st, b_dy, input_precision=PREC)
        acc_bdh = tl.zeros([C, BP], dtype=tl.float32)  # B dH_next
        for n0 in range(0, N_END, RN):
            o_n = n0 + o_rn
            m_n = o_n < N
            b_b = load_tile(b_ptr, bc_row, m_t, o_n, N)
            b_dh = tl.load(
                dh_ptr + state_base + o_n[:, None] * P + o_p[None, :],
                mask=m_n[:, None] & m_p[None, :],
                other=0.0,
            )
            acc_bdh += tl.dot(b_b, b_dh, input_precision=PREC)
        d_xdt_state = acc_bdh * to_end[:, None]
        d_xdt = acc_sdy + d_xdt_state
        b_x = tl.load(x_ptr + row[:, None] * P + o_p[None, :], mask=m_tp, other=0.0).to(tl.float64)
        through_state += tl.sum(b_x * d_xdt_state.to(tl.float64), axis=1)
        d_dt += tl.sum(b_x * d_xdt.to(tl.float64), axis=1)
        b_dx = d_xdt * dt[:, None]
        if HAS_D:
            b_dy = tl.load(dy_ptr + row[:, None] * P + o_p[None, :], mask=m_tp, other=0.0)
            b_dx += tl.load(d_ptr + i_h).to(tl.float32) * b_dy.to(tl.float32)
        # Exact zeros as +0: in autograd of the scan the gradient of x (read through a slice
        # at each step) is a sum that starts from zeros, so an exactly zero dx is +0 there,
        # whatever the signs of its terms (EXC-02 judges zero signs). A select, not "+ 0.0",
        # which a compiler allowed to ignore zero signs could drop.
        b_dx = tl.where(b_dx == 0.0, 0.0, b_dx)
        tl.store(
            dx_ptr + row[:, None] * P + o_p[None, :], b_dx.to(dx_ptr.dtype.element_ty), mask=m_tp
        )

    # Per N tile: dC = dSL B + diag(exp(G)) dY H^T, dB = dSL^T C + diag(exp(G_L - G) dt)
    # X dH_next^T, and the gate terms of exp(G) and exp(G_L).
    through_inter = tl.zeros([C], dtype=tl.float32)  # what exp(G_i) passes on
    h_dh = tl.sum(tl.zeros([C], dtype=tl.float64), axis=0)  # <H, dH_next>
    for n0 in range(0, N_END, RN):
        o_n = n0 + o_rn
        m_n = o_n < N
        m_tn = m_t[:, None] & m_n[None, :]
        acc_dc = tl.zeros([C, RN], dtype=tl.float32)  # dSL B
        acc_db = tl.zeros([C, RN], dtype=tl.float32)  # dSL^T C
        for j0 in range(0, C // RC):
            o_j = j0 * RC + o_rc
            row_j = (i_b * T + i_c * C + o_j) * H + i_h
            bc_row_j = (i_b * T + i_c * C + o_j) * G + i_g
            m_jn = (i_c * C + o_j < T)[:, None] & m_n[None, :]
            b_ds = tl.load(ds_ptr + row[:, None] * C + o_j[None, :], mask=m_t[:, None], other=0.0)
            b_dst = tl.load(
                ds_ptr + row_j[None, :] * C + o_c[:, None],
                mask=(i_c * C + o_j < T)[None, :],
                other=0.0,
            )
            b_b = tl.load(b_ptr + bc_row_j[:, None] * N + o_n[None, :], mask=m_jn, other=0.0).to(
                tl.float32
            )
            b_c = tl.load(c_ptr + bc_row_j[:, None] * N + o_n[None, :], mask=m_jn, other=0.0).to(
                tl.float32
            )
            acc_dc += tl.dot(b_ds, b_b, input_precision=PREC)
            acc_db += tl.dot(b_dst, b_c, input_precision=PREC)
        acc_dyh = tl.zeros([C, RN], dtype=tl.float32)  # dY H^T
        acc_xdh = tl.zeros([C, RN], dtype=tl.float32)  # X dH_next^T
        for p0 in range(0, P_END, RN):
            o_p = p0 + o_rn
            m_p = o_p < P
            m_tp = m_t[:, None] & m_p[None, :]
            m_pn = m_p[:, None] & m_n[None, :]
            b_dy = tl.load(dy_ptr + row[:, None] * P + o_p[None, :], mask=m_tp, other=0.0).to(
                tl.float32
            )
            b_x = tl.load(x_ptr + row[:, None] * P + o_p[None, :], mask=m_tp, other=0.0).to(
                tl.float32
            )
            b_ht = tl.load(
                h_ptr + state_base + o_n[None, :] * P + o_p[:, None], mask=m_pn, other=0.0
            )
            b_dht = tl.load(
                dh_ptr + state_base + o_n[None, :] * P + o_p[:, None], mask=m_pn, other=0.0
            )
            acc_dyh += tl.dot(b_dy, b_ht, input_precision=PREC)
            acc_xdh += tl.dot(b_x, b_dht, input_precision=PREC)
            h_dh += tl.sum(tl.sum(b_ht.to(tl.float64) * b_dht.to(tl.float64), axis=1), axis=0)
        d_c_inter = acc_dyh * gamma[:, None]  # dY H^T stays fp32: see the module docstring
        b_c = tl.load(c_ptr + bc_row[:, None] * N + o_n[None, :], mask=m_tn, other=0.0).to(
            tl.float32
        )
        through_inter += tl.sum(b_c * d_c_inter, axis=1)
        tl.store(dc_ptr + row[:, None] * N + o_n[None, :], acc_dc + d_c_inter, mask=m_tn)
        b_db = acc_db + acc_xdh * (to_end * dt)[:, None]
        tl.store(db_ptr + row[:, None] * N + o_n[None, :], b_db, mask=m_tn)

    # d a, less the pairs j < t <= i (added in chunk.py from the prefix sums stored above):
    # exp(G_i) for i >= t, exp(G_L - G_j) for j < t, exp(G_L) always.
    rows_from_t = o_c[:, None] >= o_c[None, :]  # [i, t]: i >= t
    through_state = through_state.to(tl.float32) * dt
    d_a = tl.sum(tl.where(rows_from_t, through_inter[:, None], 0.0), axis=0)
    d_a += tl.sum(tl.where(rows_from_t, 0.0, through_state[:, None]), axis=0)
    d_a += chunk_decay * h_dh.to(tl.float32)
    tl.store(dg_ptr + row, d_a, mask=m_t)
    tl.store(ddt_ptr + row, d_dt.to(tl.float32), mask=m_t)
