"""Chunked forward of Gated DeltaNet in Triton: WY representation, state scan, output.

Notation for one chunk of C steps of one (batch, head), positions i, j in [0, C):

* ``G_i``  = cumulative sum of g inside the chunk, ``gamma_i = exp(G_i)``, ``G_L`` = the
  last valid position's G (padded tail steps carry g = 0, so ``G_L`` = sum of g in the chunk).
* ``A``    = strict_lower(diag(beta) K K^T * exp(G_i - G_j)), ``Tinv = (I + A)^-1``.
* ``W``    = Tinv diag(beta * gamma) K, ``U = Tinv diag(beta) V``.
* with ``H`` the state entering the chunk: ``Vn = U - W H`` (the per-step deltas u_t),
  ``O = scale * (diag(gamma) Q H + (Q K^T * exp(G_i - G_j) * [j <= i]) Vn)`` and
  ``H_next = exp(G_L) H + K^T diag(exp(G_L - G)) Vn``.

Four kernels: ``_wy_fwd_kernel`` (one program per chunk, all chunks in parallel: G, Tinv and
its two column-scaled copies), ``_wy_apply_fwd_kernel`` (one program per chunk, launched twice:
W, then U, from those copies), ``_state_fwd_kernel`` (the only sequential part, one program
per (batch, head, V block)), ``_output_fwd_kernel`` (one program per chunk, all of V).

Numerics:

* The cumulative gates G are summed and kept in float64. Every decay factor is formed as
  ``exp(fp32(G_i - G_j))`` with the difference taken in float64: with strong decays |G|
  reaches hundreds inside one chunk, and the difference of two such fp32 sums would carry an
  absolute error of ~|G| * 2^-24, i.e. a relative error of ~|G| * 2^-24 in every decay factor
  of nearby steps (1e-5 at |G| = 600), far more than the step-by-step recurrence loses.
* ``Tinv`` is built by blocked forward substitution over four block rows of S = 16 steps:
  block row r is ``Z = (I + A_rr)^-1 ([I]_r - A[r, :rS] Tinv[:rS, :])``, the dot over the rows
  already final, then row-wise substitution inside the 16 x 16 diagonal block. These are the
  operations of a row-by-row substitution (backward stable), grouped so that most of the work
  is one dot per block row; those dots are exact fp32 ("ieee") whatever the input dtype.

Registers (every kernel must compile for sm_90 within 255 registers and no spills): an fp32
("ieee") tl.dot lowers to FMA loops that hold each thread's operand rows and columns over
the whole reduction in registers. The only form that compiles small at every size is a dot
whose two operands are loaded from memory and accumulated in a loop
(``acc += tl.dot(tl.load(a), tl.load(b))``); an operand computed in registers (a scaled tile,
a loop-carried state, a dot result) makes ptxas spill already at 64 x 32 x 32. So the
kernels stage every intermediate that feeds a dot through global memory (L2-resident: the
chunk state, Tinv and its column-scaled copies, the decayed deltas and scores), written and
re-read by the same program in the order a CTA barrier (``tl.debug_barrier``) enforces, and
reduce over at most ``REDUCE_BLOCK`` (32) columns per dot. Tile loops take their stop as a
runtime value that is never 1 (K or V rounded up to whole tiles), since Triton compiles an
argument equal to 1 as a constant and would fold a one-tile loop into a bare dot.

Spills at tiny and ragged head sizes (K or V = 1, 31): ptxas usually allots these 8-warp
kernels 128 registers, and a few bytes spill where more values stay live than that (often
the tail masks' predicates, saved to registers that then spill). What keeps every forward
specialization spill-free with Triton 3.6 and 3.9 (benchmarks/gdn_bwd_resources.py
--forward-only): W and U built by their own kernel (``_wy_apply_fwd_kernel``), not in the
program that builds Tinv (which spilled 12-36 bytes at K = 1, 31, 64), and its head count a
runtime value (its H = 1 specialization spilled 36 bytes at K = 31 with Triton 3.6); the
output's two products built in separate passes, Q H staged through memory (4 bytes at K =
1); scalar int64 chunk bases with int32 offsets inside the chunk in the scan, instead of
per-element int64 row indices (8 bytes at K = V = 31), and its head count a runtime value (4
bytes at H = 1, K = 31 with Triton 3.6). None of these changes an operation's inputs or
order: the results are bitwise those of the fused kernels.

Inputs are loaded and converted to fp32; every intermediate that is re-read (Tinv, W, U, Vn,
the chunk states H, the decayed scores) is kept in fp32. ``PREC`` picks the tl.dot precision:
"ieee" for fp32 inputs (true fp32, also what the CPU interpreter does), "tf32" for 16-bit
inputs (bf16/fp16 values are exact in tf32; only fp32 intermediates round). By default
16-bit inputs never reach these kernels: chunk.py converts them to fp32 copies first
(kernels/_precision.py), because TF32 rounding of the fp32 intermediates left the fp32
gradients dg and dh0 ~100x less accurate than an fp32 evaluation of the recurrence.

No atomics are used, so results are bitwise reproducible.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelgate.kernels._tiles import batch_head, chunk_base, chunk_rows


@triton.jit
def _decay(g_rows, g_cols, valid):
    """exp(G_i - G_j) where ``valid`` (else 0), for fp64 cumulative gates ``g_rows`` (i) and
    ``g_cols`` (j). The difference is taken in fp64 and rounded once to fp32, so nearby steps
    get an accurate factor however large |G| is; masked-out entries never reach exp, where
    G_i - G_j > 0 could overflow."""
    diff = tl.where(valid, g_rows[:, None] - g_cols[None, :], 0.0)
    return tl.where(valid, tl.exp(diff.to(tl.float32)), 0.0)


@triton.jit
def _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H, C: tl.constexpr):
    """The chunk's fp64 cumulative gates and the last valid one. Padded tail steps get G_L,
    so every decay the kernels form stays finite and padded rows contribute nothing."""
    t_idx = i_n * C + tl.arange(0, C)
    m_t = t_idx < T
    last = tl.minimum(i_n * C + C, T) - 1
    g_last = tl.load(gcum_ptr + (i_b * T + last) * H + i_h)
    g_cum = tl.load(gcum_ptr + (i_b * T + t_idx) * H + i_h, mask=m_t, other=0.0)
    return tl.where(m_t, g_cum, g_last), g_last


@triton.jit
def _forward_substitute(l_ptr, rows, valid, rhs, S: tl.constexpr, C: tl.constexpr, col0):
    """Z = (I + L)^-1 rhs for the strictly lower triangular [S, S] block L stored at rows
    ``rows``, columns ``col0 .. col0 + S`` of a row-major [*, C] matrix, by row-wise forward
    substitution: row i of Z is rhs_i - sum_{j<i} L_ij Z_j, and rows j < i are final when
    row i is built (the same operations, in the same order, as a scalar substitution)."""
    o_s = tl.arange(0, S)
    lower = tl.load(
        l_ptr + rows[:, None] * C + col0 + o_s[None, :],
        mask=valid[:, None] & (o_s[:, None] > o_s[None, :]),
        other=0.0,
    )
    z = rhs
    for i in range(1, S):
        sel = (o_s == i)[:, None]
        l_i = tl.sum(tl.where(sel, lower, 0.0), axis=0)  # row i of L, indexed by j
        z = tl.where(sel, z - tl.sum(l_i[:, None] * z, axis=0)[None, :], z)
    return z


# H a runtime value: as a constexpr, its H = 1 specialization spilled 36 bytes with Triton 3.6
# at K = 31; K_END: a loop count of 1 must stay a loop.
@triton.jit(do_not_specialize=["K_END", "H"])
def _wy_fwd_kernel(
    k_ptr,
    g_ptr,
    beta_ptr,  # inputs
    gcum_ptr,  # output (fp64)
    ainv_ptr,  # output (fp32)
    tb_ptr,
    tbg_ptr,  # outputs (fp32): Tinv diag(beta), Tinv diag(beta gamma), for _wy_apply_fwd_kernel
    T,
    H,
    K: tl.constexpr,
    C: tl.constexpr,
    S: tl.constexpr,
    BK: tl.constexpr,
    K_END,
    PREC: tl.constexpr,
):
    """Per chunk: G = cumsum(g) (fp64), Tinv = (I + A)^-1 by blocked forward substitution,
    and the copies Tinv diag(beta) and Tinv diag(beta gamma) from which _wy_apply_fwd_kernel
    builds U and W (in this program, those two products made it spill, see the module
    docstring).

    A is computed whole and stored in the Tinv buffer; then each block row r of S rows
    becomes Tinv's block row r in place: Y = A[r, :rS] Tinv[:rS, :] (a dot over rows already
    final), then (I + A_rr) Z = [-Y | I | 0] by row-wise substitution. Block rows go through
    memory, ordered by CTA barriers, so every dot reads both operands from memory (see the
    module docstring). ``K_END`` (K rounded up to whole tiles) is a runtime value, never 1,
    so even a single-tile loop stays a loop (see chunk.py, _round_up).
    """
    i_n = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_h = batch_head(i_bh, H)
    o_c = tl.arange(0, C)
    _t_idx, m_t, row = chunk_rows(i_b, i_h, i_n, T, H, C)

    g = tl.load(g_ptr + row, mask=m_t, other=0.0).to(tl.float64)
    g_cum = tl.cumsum(g, axis=0)
    tl.store(gcum_ptr + row, g_cum, mask=m_t)
    beta = tl.load(beta_ptr + row, mask=m_t, other=0.0).to(tl.float32)

    kk = tl.zeros([C, C], dtype=tl.float32)
    for k0 in range(0, K_END, BK):
        o_k = k0 + tl.arange(0, BK)
        m_tk = m_t[:, None] & (o_k < K)[None, :]
        b_k = tl.load(k_ptr + row[:, None] * K + o_k[None, :], mask=m_tk, other=0.0).to(tl.float32)
        b_kt = tl.load(
            k_ptr + row[None, :] * K + o_k[:, None],
            mask=(o_k < K)[:, None] & m_t[None, :],
            other=0.0,
        ).to(tl.float32)
        kk += tl.dot(b_k, b_kt, input_precision=PREC)
    strict = o_c[:, None] > o_c[None, :]
    a = beta[:, None] * kk * _decay(g_cum, g_cum, strict)
    tl.store(ainv_ptr + row[:, None] * C + o_c[None, :], a, mask=m_t[:, None])
    tl.debug_barrier()

    bg = beta * tl.exp(g_cum.to(tl.float32))
    o_s = tl.arange(0, S)
    for r in range(0, C // S):
        rows_r = (i_b * T + i_n * C + r * S + o_s) * H + i_h
        valid_r = i_n * C + r * S + o_s < T
        # Y = A[r, :rS] Tinv[:rS, :]: rows m < r of the buffer already hold Tinv.
        y = tl.zeros([S, C], dtype=tl.float32)
        for m in range(0, r):
            rows_m = (i_b * T + i_n * C + m * S + o_s) * H + i_h
            valid_m = i_n * C + m * S + o_s < T
            b_a = tl.load(
                ainv_ptr + rows_r[:, None] * C + m * S + o_s[None, :],
                mask=valid_r[:, None],
                other=0.0,
            )
            b_t = tl.load(
                ainv_ptr + rows_m[:, None] * C + o_c[None, :], mask=valid_m[:, None], other=0.0
            )
            y += tl.dot(b_a, b_t, input_precision="ieee")
        eye_r = tl.where(o_c[None, :] == (r * S + o_s)[:, None], 1.0, 0.0)
        z = _forward_substitute(ainv_ptr, rows_r, valid_r, eye_r - y, S, C, r * S)
        tl.debug_barrier()  # every thread has read A's block row r before it is overwritten
        tl.store(ainv_ptr + rows_r[:, None] * C + o_c[None, :], z, mask=valid_r[:, None])
        tl.store(
            tb_ptr + rows_r[:, None] * C + o_c[None, :], z * beta[None, :], mask=valid_r[:, None]
        )
        tl.store(
            tbg_ptr + rows_r[:, None] * C + o_c[None, :], z * bg[None, :], mask=valid_r[:, None]
        )
        tl.debug_barrier()


@triton.jit(do_not_specialize=["D_END"])  # a loop count of 1 must stay a loop
def _wy_apply_fwd_kernel(
    t_ptr,  # input (fp32, from _wy_fwd_kernel): Tinv diag(beta gamma) or Tinv diag(beta)
    x_ptr,  # input: k or v, [B, T, H, D]
    out_ptr,  # output (fp32): W or U, [B, T, H, D]
    T,
    H: tl.constexpr,
    D: tl.constexpr,
    C: tl.constexpr,
    RC: tl.constexpr,
    BD: tl.constexpr,
    D_END,
    PREC: tl.constexpr,
):
    """Per chunk: out = t x, in column tiles of BD, reducing over RC chunk steps per dot with
    both operands loaded from memory; W = (Tinv diag(beta gamma)) K and U = (Tinv diag(beta))
    V are two launches of this kernel."""
    i_n = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_h = batch_head(i_bh, H)
    _t_idx, m_t, row = chunk_rows(i_b, i_h, i_n, T, H, C)
    o_rc = tl.arange(0, RC)
    for d0 in range(0, D_END, BD):
        o_d = d0 + tl.arange(0, BD)
        m_d = o_d < D
        acc = tl.zeros([C, BD], dtype=tl.float32)
        for i_c in range(0, C // RC):
            t_c = i_n * C + i_c * RC + o_rc
            rows_c = (i_b * T + t_c) * H + i_h
            b_t = tl.load(
                t_ptr + row[:, None] * C + i_c * RC + o_rc[None, :], mask=m_t[:, None], other=0.0
            )
            b_x = tl.load(
                x_ptr + rows_c[:, None] * D + o_d[None, :],
                mask=(t_c < T)[:, None] & m_d[None, :],
                other=0.0,
            ).to(tl.float32)
            acc += tl.dot(b_t, b_x, input_precision=PREC)
        tl.store(out_ptr + row[:, None] * D + o_d[None, :], acc, mask=m_t[:, None] & m_d[None, :])


# H a runtime value: as a constexpr, its H = 1 specialization spilled 4 bytes with Triton 3.6
# at K = 31 (as _qk_bwd_kernel's did, chunk_bwd.py); NT and K_END: a loop count of 1 must stay
# a loop.
@triton.jit(do_not_specialize=["NT", "K_END", "H"])
def _state_fwd_kernel(
    k_ptr,
    w_ptr,
    u_ptr,
    gcum_ptr,
    h0_ptr,  # inputs
    h_ptr,
    vn_ptr,
    ht_ptr,  # outputs (fp32)
    dvn_ptr,  # scratch (fp32): this program's decayed deltas, [C, BV]
    T,
    NT,
    K_END,
    H,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    RK: tl.constexpr,
    RC: tl.constexpr,
    BV: tl.constexpr,
    HAS_H0: tl.constexpr,
    STORE_HT: tl.constexpr,
    PREC: tl.constexpr,
):
    """Sequential scan over chunks for one (batch, head, V block); stores every chunk's
    entering state H_n and the deltas Vn = U - W H_n.

    The state lives in the chunk-state buffer, not in registers: step n reads H_n in row
    tiles of RK (Vn = U - W H_n, reducing over RK rows at a time), writes diag(exp(G_L - G))
    Vn to this program's scratch, then builds H_{n+1} = exp(G_L) H_n + K^T (that) tile by
    tile, reducing over RC steps at a time. CTA barriers order the steps. Every dot reads
    both operands from memory, so its registers stay small for any K (see the module
    docstring); ``K_END`` (K rounded up to whole tiles) is a runtime value so the tile loops
    stay loops."""
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_h = batch_head(i_bh, H)
    o_c = tl.arange(0, C)
    o_rk = tl.arange(0, RK)
    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < V
    scratch = dvn_ptr + (i_bh.to(tl.int64) * tl.num_programs(0) + i_v) * C * BV
    scratch_off = o_c[:, None] * BV + tl.arange(0, BV)[None, :]

    for k0 in range(0, K_END, RK):  # H_0: the initial state or zeros
        o_k = k0 + o_rk
        m_kv = (o_k < K)[:, None] & m_v[None, :]
        tile = tl.zeros([RK, BV], dtype=tl.float32)
        if HAS_H0:
            tile += tl.load(
                h0_ptr + i_bh.to(tl.int64) * K * V + o_k[:, None] * V + o_v[None, :],
                mask=m_kv,
                other=0.0,
            )
        tl.store(
            h_ptr + (i_b * NT * H + i_h) * K * V + o_k[:, None] * V + o_v[None, :], tile, mask=m_kv
        )
    tl.debug_barrier()
    for i_n in range(0, NT):
        # a scalar int64 base of the chunk and int32 offsets inside it (see _output_fwd_kernel)
        m_t, chunk_row = chunk_base(i_b, i_h, i_n, T, H, C)
        w_base = w_ptr + chunk_row * K
        off_v = o_c[:, None] * (H * V) + o_v[None, :]
        m_tv = m_t[:, None] & m_v[None, :]
        h_base = h_ptr + ((i_b * NT + i_n) * H + i_h) * K * V
        acc = tl.zeros([C, BV], dtype=tl.float32)
        for k0 in range(0, K_END, RK):
            o_k = k0 + o_rk
            m_k = o_k < K
            b_w = tl.load(
                w_base + o_c[:, None] * (H * K) + o_k[None, :],
                mask=m_t[:, None] & m_k[None, :],
                other=0.0,
            )
            b_h = tl.load(
                h_base + o_k[:, None] * V + o_v[None, :],
                mask=m_k[:, None] & m_v[None, :],
                other=0.0,
            )
            acc += tl.dot(b_w, b_h, input_precision=PREC)
        b_vn = tl.load(u_ptr + chunk_row * V + off_v, mask=m_tv, other=0.0) - acc
        tl.store(vn_ptr + chunk_row * V + off_v, b_vn, mask=m_tv)
        g_cum, g_last = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H, C)
        k_decay = tl.where(m_t, tl.exp((g_last - g_cum).to(tl.float32)), 0.0)
        tl.store(scratch + scratch_off, b_vn * k_decay[:, None])
        tl.debug_barrier()
        if i_n + 1 < NT:
            _state_update(
                k_ptr,
                gcum_ptr,
                scratch,
                h_base,
                h_base + H * K * V,
                i_b,
                i_h,
                i_n,
                T,
                K_END,
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
    if STORE_HT:  # the state after the last chunk, from what the last step left in memory
        _state_update(
            k_ptr,
            gcum_ptr,
            scratch,
            h_ptr + ((i_b * NT + NT - 1) * H + i_h) * K * V,
            ht_ptr + i_bh.to(tl.int64) * K * V,
            i_b,
            i_h,
            NT - 1,
            T,
            K_END,
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
def _state_update(
    k_ptr,
    gcum_ptr,
    scratch,
    h_src,
    h_dst,
    i_b,
    i_h,
    i_n,
    T,
    K_END,
    o_v,
    H,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    RK: tl.constexpr,
    RC: tl.constexpr,
    BV: tl.constexpr,
    PREC: tl.constexpr,
):
    """h_dst = exp(G_L) h_src + K^T D, D = diag(exp(G_L - G)) Vn as left in ``scratch``,
    in row tiles of RK, reducing over RC steps at a time; ends with a CTA barrier."""
    o_rk = tl.arange(0, RK)
    o_rc = tl.arange(0, RC)
    m_v = o_v < V
    last = tl.minimum(i_n * C + C, T) - 1
    chunk_decay = tl.exp(tl.load(gcum_ptr + (i_b * T + last) * H + i_h).to(tl.float32))
    k_base = k_ptr + ((i_b * T + i_n * C) * H + i_h) * K  # int32 offsets inside the chunk
    for k0 in range(0, K_END, RK):
        o_k = k0 + o_rk
        m_k = o_k < K
        upd = tl.zeros([RK, BV], dtype=tl.float32)
        for i_c in range(0, C // RC):
            o_j = i_c * RC + o_rc
            b_kt = tl.load(
                k_base + o_j[None, :] * (H * K) + o_k[:, None],
                mask=(i_n * C + o_j < T)[None, :] & m_k[:, None],
                other=0.0,
            ).to(tl.float32)
            b_d = tl.load(scratch + (i_c * RC + o_rc)[:, None] * BV + tl.arange(0, BV)[None, :])
            upd += tl.dot(b_kt, b_d, input_precision=PREC)
        m_kv = m_k[:, None] & m_v[None, :]
        b_h = tl.load(h_src + o_k[:, None] * V + o_v[None, :], mask=m_kv, other=0.0)
        tl.store(h_dst + o_k[:, None] * V + o_v[None, :], b_h * chunk_decay + upd, mask=m_kv)
    tl.debug_barrier()


@triton.jit(do_not_specialize=["K_END", "V_END"])  # a loop count of 1 must stay a loop
def _output_fwd_kernel(
    q_ptr,
    k_ptr,
    vn_ptr,
    gcum_ptr,
    h_ptr,  # inputs
    o_ptr,  # output, in v's dtype
    scores_ptr,  # output (fp32): Q K^T * decay * [j <= i], re-read here and by the backward
    qh_ptr,  # scratch (fp32): Q H of this chunk, [B, T, H, V]
    T,
    NT,
    scale,
    K_END,
    V_END,
    H: tl.constexpr,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    RC: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    PREC: tl.constexpr,
):
    """O = scale * (diag(gamma) Q H + P Vn) with P = Q K^T * decay * [j <= i], for one chunk
    and all of V: P is built once, stored, and read back in column blocks of RC for P Vn.

    The two products of O are built in separate passes over V: Q H is stored to ``qh_ptr``
    (fp32, exact), and after a CTA barrier the P Vn pass reads it back to combine. Built in
    the same V loop, the two accumulators spilled registers on sm_90 (4-8 bytes at K = 1 with
    Triton 3.6 and 3.9); the sum is the same expression on the same fp32 values as before."""
    i_n = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_h = batch_head(i_bh, H)
    o_c = tl.arange(0, C)
    o_rc = tl.arange(0, RC)
    # Scalar int64 bases of this chunk and int32, constexpr-strided offsets inside it keep
    # the per-element address arithmetic (and its registers) small.
    m_t, chunk_row = chunk_base(i_b, i_h, i_n, T, H, C)
    q_base = q_ptr + chunk_row * K
    k_base = k_ptr + chunk_row * K
    vn_base = vn_ptr + chunk_row * V
    p_base = scores_ptr + chunk_row * C
    o_base = o_ptr + chunk_row * V
    qh_base = qh_ptr + chunk_row * V
    h_base = h_ptr + ((i_b * NT + i_n) * H + i_h) * K * V

    acc_qk = tl.zeros([C, C], dtype=tl.float32)
    for k0 in range(0, K_END, BK):
        o_k = k0 + tl.arange(0, BK)
        m_k = o_k < K
        b_q = tl.load(
            q_base + o_c[:, None] * (H * K) + o_k[None, :],
            mask=m_t[:, None] & m_k[None, :],
            other=0.0,
        ).to(tl.float32)
        b_kt = tl.load(
            k_base + o_c[None, :] * (H * K) + o_k[:, None],
            mask=m_k[:, None] & m_t[None, :],
            other=0.0,
        ).to(tl.float32)
        acc_qk += tl.dot(b_q, b_kt, input_precision=PREC)
    g_cum, _ = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H, C)
    scores = acc_qk * _decay(g_cum, g_cum, o_c[:, None] >= o_c[None, :])
    tl.store(p_base + o_c[:, None] * (H * C) + o_c[None, :], scores, mask=m_t[:, None])
    tl.debug_barrier()

    for v0 in range(0, V_END, BV):
        o_v = v0 + tl.arange(0, BV)
        m_v = o_v < V
        acc_qh = tl.zeros([C, BV], dtype=tl.float32)
        for k0 in range(0, K_END, BK):
            o_k = k0 + tl.arange(0, BK)
            m_k = o_k < K
            b_q = tl.load(
                q_base + o_c[:, None] * (H * K) + o_k[None, :],
                mask=m_t[:, None] & m_k[None, :],
                other=0.0,
            ).to(tl.float32)
            b_h = tl.load(
                h_base + o_k[:, None] * V + o_v[None, :],
                mask=m_k[:, None] & m_v[None, :],
                other=0.0,
            )
            acc_qh += tl.dot(b_q, b_h, input_precision=PREC)
        tl.store(
            qh_base + o_c[:, None] * (H * V) + o_v[None, :],
            acc_qh,
            mask=m_t[:, None] & m_v[None, :],
        )
    tl.debug_barrier()

    gamma_scale = tl.exp(g_cum.to(tl.float32)) * scale
    for v0 in range(0, V_END, BV):
        o_v = v0 + tl.arange(0, BV)
        m_v = o_v < V
        acc_pv = tl.zeros([C, BV], dtype=tl.float32)
        for i_c in range(0, C // RC):
            o_j = i_c * RC + o_rc
            b_p = tl.load(
                p_base + o_c[:, None] * (H * C) + o_j[None, :], mask=m_t[:, None], other=0.0
            )
            b_vn = tl.load(
                vn_base + o_j[:, None] * (H * V) + o_v[None, :],
                mask=(i_n * C + o_j < T)[:, None] & m_v[None, :],
                other=0.0,
            )
            acc_pv += tl.dot(b_p, b_vn, input_precision=PREC)
        acc_qh = tl.load(
            qh_base + o_c[:, None] * (H * V) + o_v[None, :],
            mask=m_t[:, None] & m_v[None, :],
            other=0.0,
        )
        b_o = acc_qh * gamma_scale[:, None] + acc_pv * scale
        tl.store(
            o_base + o_c[:, None] * (H * V) + o_v[None, :],
            b_o.to(o_ptr.dtype.element_ty),
            mask=m_t[:, None] & m_v[None, :],
        )
