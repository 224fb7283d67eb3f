"""Register-resident forward of Gated DeltaNet: three kernels, tf32x3 dots, opt-in.

The same chunked algorithm and notation as chunk_fwd.py (read its module docstring first):
per chunk of C = 64 steps, ``A = strict_lower(diag(beta) K K^T * exp(G_i - G_j))``,
``Tinv = (I + A)^-1``, ``W = Tinv diag(beta gamma) K``, ``U = Tinv diag(beta) V``; per chunk
in sequence ``Vn = U - W H`` and ``H_next = exp(G_L) H + K^T diag(exp(G_L - G)) Vn``; and
``O = scale * (diag(gamma) Q H + (Q K^T * exp(G_i - G_j) * [j <= i]) Vn)``.

Why a second forward: the shipped one stages every dot operand through global memory,
because an IEEE fp32 ``tl.dot`` whose operand lives in registers spills on sm_90 (chunk_fwd.py).
That design is 6.7-10x slower than flash-linear-attention on the H200 (docs/kernels/gdn.md).
Error-compensated three-pass TF32 dots (``input_precision="tf32x3"``: a = hi + lo, a b ~
hi hi + hi lo + lo hi, about fp32's accuracy) run on tensor cores and, in the offline sm_90
compile of benchmarks/gdn_scan_registers.py, keep a [128, 16] state in registers without
spills when it is split in two row tiles. So here every dot takes its operands from
registers, and the launches drop from five to three:

* ``_wy_fast_kernel`` (one program per chunk, all chunks in parallel): G (fp64), A, Tinv,
  W and U, with nothing re-read from memory. Tinv is built in registers: the four 16 x 16
  diagonal blocks of (I + A) are inverted together by row-wise forward substitution (a
  [4, 16, 16] tensor, 15 steps), giving D = (I + A_bd)^-1 (block diagonal); with the
  strictly block-lower rest A_off, I + A = D^-1 (I + N), N = D A_off, and since N is
  strictly block lower (N^4 = 0), Tinv = (I + N)^-1 D is reached exactly by three steps of
  Y <- D - N Y from Y = D. Each step finalizes one more block row from rows already final:
  the block forward substitution of chunk_fwd.py (whose diagonal blocks are applied by
  substitution instead of as the explicit inverse D; both are the usual stable forms).
  Then W = Tinv (diag(beta gamma) K) and U = Tinv (diag(beta) V) in column tiles, the
  scales applied to the loaded tiles.
* ``_scan_fast_kernel`` (one program per (batch, head, V tile of BV), the only sequential
  part): the state tile [K, BV] stays in registers through the chunk loop as NK row tiles
  of BKS rows (the prototype's split; unsplit, tf32x3 spilled at K = 128), storing the
  entering state H and Vn of every chunk (the output kernel and the backward read them).
* ``_output_fast_kernel`` (one program per chunk, all of V): the masked, decayed Q K^T
  once per chunk, kept in registers for every V tile (and stored: the backward reads it),
  then O per V tile from Q H and P Vn.

Outputs are what the shipped forward returns and saves (o, the final state, and G, Tinv, W,
the chunk states, Vn and the scores in the same layouts), so the shipped backward runs on
them unchanged.

Numerics kept from chunk_fwd.py: G summed and kept in fp64; every decay factor
``exp(fp32(G_i - G_j))`` with the difference in fp64 (chunk_fwd.py says why: strong decays
make |G| reach hundreds inside a chunk). What changes: the dots are tf32x3 on fp32 inputs
(TF32 for 16-bit inputs, which TF32 holds exactly, reached only with
``_precision.SIXTEEN_BIT_COMPUTE = "tf32"``), not IEEE; the interpreter computes them in
fp32 whatever the precision, so CPU tests check the algorithm, not the TF32 rounding, which
needs the device.

Registers (offline sm_90 compile, Triton 3.9 and 3.6: benchmarks/gdn_fwd_fast_resources.py,
benchmarks/results/gdn-fwd-fast-resources-cpu.json). A tf32x3 dot holds both operands' hi
and lo parts, so what is live at once decides everything; what kept every kernel here
spill-free:

* the inverse's three steps are a loop, not unrolled: unrolled (``tl.static_range``) their
  operands were live together and spilled 1.3-1.5 KB; the straight-line product form
  Tinv = (I - N)(I + N^2) D (also exact, as N^4 = 0) spilled 1.0-2.8 KB;
* W and U scale the loaded K and V tiles, not Tinv's columns: Tinv is then the one register
  operand of both loops (two scaled copies of Tinv spilled 8 bytes at K = 128 with 3.9);
* the output's V tiles are 32 wide (64: 80-92 bytes of spills at K = 128);
* the scan loads the keys just before their dot (the prototype's finding).

The per-chunk kernels still use most of the register file (``_wy_fast_kernel`` 204-255 per
thread; at 8 warps, for K > 64, one CTA per SM), so ptxas's choices can move with small
changes: rerun the resources script after any edit. The warp counts come from the same
figures (chunk.py's ``fast_num_warps``).

Head sizes: K and V are padded to powers of two (>= 16) inside the kernels with masked
loads and stores, so any K <= 256 and any V run (the CPU tests cover K, V in {1, 16, 20, 24,
31, 32, 33, 63, 64, 128}). Rows that are not whole 16-byte vectors (K or V not a multiple of
4) load one element per instruction: up to 32 the kernels stay spill-free, above it the scan
spilled 20-244 bytes, so there chunk.registers_padding zero-pads the whole call to aligned
widths. The output kernel's K loop stops at a runtime KP (a constexpr one-tile K loop
spilled 48 bytes at (K, V) = (32, 64) with Triton 3.6; runtime KP and VP: 92 bytes at
K = V = 31; a runtime VP alone: 48-232 at K = V = 17, 31 and (20, 24)). No atomics:
results are bitwise reproducible for a given launch configuration.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernelgate.kernels._tiles import batch_head, chunk_base
from kernelgate.kernels.gdn.chunk_fwd import _decay, _load_gate_cumsum


@triton.jit
def _unit_lower_inverse(a, C: tl.constexpr, S: tl.constexpr, PREC: tl.constexpr):
    """(I + a)^-1 for a strictly lower triangular [C, C] register tensor ``a``, in registers.

    The C / S diagonal blocks of S x S are inverted at once, as one [C / S, S, S] tensor, by
    row-wise forward substitution (row i of each block is final once rows j < i are, the
    operations of a scalar substitution); D = their block-diagonal matrix. Then with N =
    D a_off (a_off: a below the diagonal blocks, so N is strictly block lower and N^(C/S) =
    0), (I + a)^-1 = (I + N)^-1 D, which C / S - 1 steps of Y <- D - N Y reach exactly from
    Y = D: each step makes one more block row final (block forward substitution)."""
    NB: tl.constexpr = C // S
    o_b = tl.arange(0, NB)
    o_s = tl.arange(0, S)
    o_c = tl.arange(0, C)
    same = o_b[:, None] == o_b[None, :]  # [NB, NB]: diagonal blocks
    a4 = tl.reshape(a, (NB, S, NB, S))
    lower = tl.sum(tl.where(same[:, None, :, None], a4, 0.0), axis=2)  # [NB, S, S]
    eye = tl.where(o_s[:, None] == o_s[None, :], 1.0, 0.0)
    z = tl.zeros([NB, S, S], dtype=tl.float32) + eye[None, :, :]
    for i in range(1, S):
        sel = (o_s == i)[None, :, None]
        l_i = tl.sum(tl.where(sel, lower, 0.0), axis=1)  # [NB, S]: row i of L, indexed by j
        z = tl.where(sel, z - tl.sum(l_i[:, :, None] * z, axis=1)[:, None, :], z)
    d = tl.reshape(tl.where(same[:, None, :, None], z[:, :, None, :], 0.0), (C, C))
    a_off = tl.where((o_c[:, None] // S) > (o_c[None, :] // S), a, 0.0)
    n = tl.dot(d, a_off, input_precision=PREC)
    y = d
    # A loop, not unrolled: unrolled (tl.static_range), the three steps' tf32x3 operands
    # were live together and spilled 1.3-1.5 KB on sm_90 at 4 and 8 warps.
    for _ in range(NB - 1):
        y = d - tl.dot(n, y, input_precision=PREC)
    return y


@triton.jit(do_not_specialize=["T", "H"])
def _wy_fast_kernel(
    k_ptr,
    v_ptr,
    g_ptr,
    beta_ptr,  # inputs
    gcum_ptr,  # output (fp64): G
    ainv_ptr,  # output (fp32): Tinv, [B, T, H, C] (the backward reads it)
    w_ptr,
    u_ptr,  # outputs (fp32): W [B, T, H, K], U [B, T, H, V]
    T,
    H,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    S: tl.constexpr,
    KP: tl.constexpr,
    VP: tl.constexpr,
    RK: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    PREC: tl.constexpr,
):
    """One chunk: G = cumsum(g) in fp64, A, Tinv (``_unit_lower_inverse``), W and U, every
    dot on register operands. K and V are walked in column tiles (RK for K K^T, BK and BV for
    W and U) up to their powers of two KP and VP (masked past K and V); the key tiles are
    loaded twice (for K K^T, then for W) rather than held across the inverse, where they
    would only add live registers."""
    i_n = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_h = batch_head(i_bh, H)
    o_c = tl.arange(0, C)
    m_t, chunk_row = chunk_base(i_b, i_h, i_n, T, H, C)
    g = tl.load(g_ptr + chunk_row + o_c * H, mask=m_t, other=0.0).to(tl.float64)
    g_cum = tl.cumsum(g, axis=0)  # padded steps carry g = 0, hence G_L
    tl.store(gcum_ptr + chunk_row + o_c * H, g_cum, mask=m_t)
    beta = tl.load(beta_ptr + chunk_row + o_c * H, mask=m_t, other=0.0).to(tl.float32)

    k_base = k_ptr + chunk_row * K
    kk = tl.zeros([C, C], dtype=tl.float32)
    for k0 in range(0, KP, RK):
        o_k = k0 + tl.arange(0, RK)
        b_k = tl.load(
            k_base + o_c[:, None] * (H * K) + o_k[None, :],
            mask=m_t[:, None] & (o_k < K)[None, :],
            other=0.0,
        ).to(tl.float32)
        kk += tl.dot(b_k, tl.trans(b_k), input_precision=PREC)
    a = beta[:, None] * kk * _decay(g_cum, g_cum, o_c[:, None] > o_c[None, :])
    tinv = _unit_lower_inverse(a, C, S, PREC)
    tl.store(
        ainv_ptr + chunk_row * C + o_c[:, None] * (H * C) + o_c[None, :], tinv, mask=m_t[:, None]
    )

    # W = Tinv (diag(beta gamma) K) and U = Tinv (diag(beta) V): the scales go on the loaded
    # tiles, so Tinv is the one register operand of both loops (scaling Tinv's columns
    # instead kept two more [C, C] matrices live).
    bg = beta * tl.exp(g_cum.to(tl.float32))
    w_base = w_ptr + chunk_row * K
    for k0 in range(0, KP, BK):
        o_k = k0 + tl.arange(0, BK)
        m_tk = m_t[:, None] & (o_k < K)[None, :]
        off = o_c[:, None] * (H * K) + o_k[None, :]
        b_k = tl.load(k_base + off, mask=m_tk, other=0.0).to(tl.float32) * bg[:, None]
        tl.store(w_base + off, tl.dot(tinv, b_k, input_precision=PREC), mask=m_tk)
    v_base = v_ptr + chunk_row * V
    u_base = u_ptr + chunk_row * V
    for v0 in range(0, VP, BV):
        o_v = v0 + tl.arange(0, BV)
        m_tv = m_t[:, None] & (o_v < V)[None, :]
        off = o_c[:, None] * (H * V) + o_v[None, :]
        b_v = tl.load(v_base + off, mask=m_tv, other=0.0).to(tl.float32) * beta[:, None]
        tl.store(u_base + off, tl.dot(tinv, b_v, input_precision=PREC), mask=m_tv)


@triton.jit
def _state_tile_load(base, o_k, o_v, K: tl.constexpr, V: tl.constexpr):
    """Rows o_k, columns o_v of a row-major [K, V] fp32 state (0 past K or V)."""
    return tl.load(
        base + o_k[:, None] * V + o_v[None, :],
        mask=(o_k < K)[:, None] & (o_v < V)[None, :],
        other=0.0,
    )


@triton.jit
def _state_tile_store(base, o_k, o_v, K: tl.constexpr, V: tl.constexpr, tile):
    """Store ``tile`` to rows o_k, columns o_v of a row-major [K, V] fp32 state."""
    tl.store(
        base + o_k[:, None] * V + o_v[None, :], tile, mask=(o_k < K)[:, None] & (o_v < V)[None, :]
    )


@triton.jit
def _w_times_h(w_base, h, o_c, o_k, m_t, H, K: tl.constexpr, PREC: tl.constexpr):
    """W[:, rows o_k] h for one state row tile (W loaded from memory, h in registers)."""
    b_w = tl.load(
        w_base + o_c[:, None] * (H * K) + o_k[None, :],
        mask=m_t[:, None] & (o_k < K)[None, :],
        other=0.0,
    )
    return tl.dot(b_w, h, input_precision=PREC)


@triton.jit
def _advance(k_base, h, b_d, decay, o_c, o_k, m_t, H, K: tl.constexpr, PREC: tl.constexpr):
    """decay h + K[:, rows o_k]^T b_d for one state row tile. The keys are loaded here, just
    before their dot, so they are not live across the Vn computation (in the prototype that
    took BV = 16, NK = 2, 4 warps from 220-255 registers to 167-239)."""
    b_kt = tl.load(
        k_base + o_c[None, :] * (H * K) + o_k[:, None],
        mask=(o_k < K)[:, None] & m_t[None, :],
        other=0.0,
    ).to(tl.float32)
    return h * decay + tl.dot(b_kt, b_d, input_precision=PREC)


# T, NT, H runtime values: one compiled specialization for every length and head count.
@triton.jit(do_not_specialize=["T", "NT", "H"])
def _scan_fast_kernel(
    k_ptr,
    w_ptr,
    u_ptr,
    gcum_ptr,
    h0_ptr,  # inputs (k in its dtype; W, U fp32; G fp64; h0 fp32)
    h_ptr,
    vn_ptr,
    ht_ptr,  # outputs (fp32): entering states [B, NT, H, K, V], Vn [B, T, H, V], final state
    T,
    NT,
    H,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    BKS: tl.constexpr,
    NK: tl.constexpr,
    BV: tl.constexpr,
    HAS_H0: tl.constexpr,
    STORE_HT: tl.constexpr,
    PREC: tl.constexpr,
):
    """The sequential scan of one (batch, head, V tile) with the state in registers: NK (1,
    2 or 4) row tiles h_a .. h_d of BKS rows (those past NK unused), carried through the
    chunk loop. Per chunk: store the entering state, Vn = U - W H (stored), then H <-
    exp(G_L) H + K^T diag(exp(G_L - G)) Vn. Nothing is re-read from memory."""
    i_v = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_h = batch_head(i_bh, H)
    o_c = tl.arange(0, C)
    o_ka = tl.arange(0, BKS)
    o_kb = BKS + o_ka
    o_kc = 2 * BKS + o_ka
    o_kd = 3 * BKS + o_ka
    o_v = i_v * BV + tl.arange(0, BV)
    m_v = o_v < V
    state0 = h0_ptr + i_bh.to(tl.int64) * K * V
    h_a = tl.zeros([BKS, BV], dtype=tl.float32)
    h_b = tl.zeros([BKS, BV], dtype=tl.float32)
    h_c = tl.zeros([BKS, BV], dtype=tl.float32)
    h_d = tl.zeros([BKS, BV], dtype=tl.float32)
    if HAS_H0:
        h_a += _state_tile_load(state0, o_ka, o_v, K, V)
        if NK >= 2:
            h_b += _state_tile_load(state0, o_kb, o_v, K, V)
        if NK == 4:
            h_c += _state_tile_load(state0, o_kc, o_v, K, V)
            h_d += _state_tile_load(state0, o_kd, o_v, K, V)
    for i_n in range(0, NT):
        m_t, chunk_row = chunk_base(i_b, i_h, i_n, T, H, C)
        h_base = h_ptr + ((i_b * NT + i_n) * H + i_h) * K * V
        w_base = w_ptr + chunk_row * K
        k_base = k_ptr + chunk_row * K
        _state_tile_store(h_base, o_ka, o_v, K, V, h_a)
        wh = _w_times_h(w_base, h_a, o_c, o_ka, m_t, H, K, PREC)
        if NK >= 2:
            _state_tile_store(h_base, o_kb, o_v, K, V, h_b)
            wh += _w_times_h(w_base, h_b, o_c, o_kb, m_t, H, K, PREC)
        if NK == 4:
            _state_tile_store(h_base, o_kc, o_v, K, V, h_c)
            _state_tile_store(h_base, o_kd, o_v, K, V, h_d)
            wh += _w_times_h(w_base, h_c, o_c, o_kc, m_t, H, K, PREC)
            wh += _w_times_h(w_base, h_d, o_c, o_kd, m_t, H, K, PREC)
        off_v = o_c[:, None] * (H * V) + o_v[None, :]
        m_tv = m_t[:, None] & m_v[None, :]
        b_vn = tl.load(u_ptr + chunk_row * V + off_v, mask=m_tv, other=0.0) - wh
        tl.store(vn_ptr + chunk_row * V + off_v, b_vn, mask=m_tv)
        g_cum, g_last = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H, C)
        b_d = b_vn * tl.where(m_t, tl.exp((g_last - g_cum).to(tl.float32)), 0.0)[:, None]
        decay = tl.exp(g_last.to(tl.float32))
        h_a = _advance(k_base, h_a, b_d, decay, o_c, o_ka, m_t, H, K, PREC)
        if NK >= 2:
            h_b = _advance(k_base, h_b, b_d, decay, o_c, o_kb, m_t, H, K, PREC)
        if NK == 4:
            h_c = _advance(k_base, h_c, b_d, decay, o_c, o_kc, m_t, H, K, PREC)
            h_d = _advance(k_base, h_d, b_d, decay, o_c, o_kd, m_t, H, K, PREC)
    if STORE_HT:
        ht = ht_ptr + i_bh.to(tl.int64) * K * V
        _state_tile_store(ht, o_ka, o_v, K, V, h_a)
        if NK >= 2:
            _state_tile_store(ht, o_kb, o_v, K, V, h_b)
        if NK == 4:
            _state_tile_store(ht, o_kc, o_v, K, V, h_c)
            _state_tile_store(ht, o_kd, o_v, K, V, h_d)


@triton.jit(do_not_specialize=["T", "NT", "H", "KP"])  # see _output_fast_kernel's KP
def _output_fast_kernel(
    q_ptr,
    k_ptr,
    vn_ptr,
    gcum_ptr,
    h_ptr,  # inputs
    o_ptr,  # output, in its own dtype
    scores_ptr,  # output (fp32): Q K^T * decay * [j <= i] (the backward reads it)
    T,
    NT,
    H,
    scale,
    K: tl.constexpr,
    V: tl.constexpr,
    C: tl.constexpr,
    KP,  # a runtime stop of the K loops (as a constexpr: 48 B of spills at (K, V) = (32, 64))
    VP: tl.constexpr,
    BK: tl.constexpr,
    BV: tl.constexpr,
    PREC: tl.constexpr,
):
    """One chunk, all of V: P = Q K^T * decay * [j <= i] built once in registers (and
    stored), then per V tile of BV, O = scale * (diag(gamma) Q H + P Vn), with Q reloaded
    per K tile (cache-resident) rather than held whole across the V loop."""
    i_n = tl.program_id(0)
    i_bh = tl.program_id(1)
    i_b, i_h = batch_head(i_bh, H)
    o_c = tl.arange(0, C)
    m_t, chunk_row = chunk_base(i_b, i_h, i_n, T, H, C)
    q_base = q_ptr + chunk_row * K
    k_base = k_ptr + chunk_row * K
    h_base = h_ptr + ((i_b * NT + i_n) * H + i_h) * K * V

    acc_qk = tl.zeros([C, C], dtype=tl.float32)
    for k0 in range(0, KP, BK):
        o_k = k0 + tl.arange(0, BK)
        m_tk = m_t[:, None] & (o_k < K)[None, :]
        off = o_c[:, None] * (H * K) + o_k[None, :]
        b_q = tl.load(q_base + off, mask=m_tk, other=0.0).to(tl.float32)
        b_k = tl.load(k_base + off, mask=m_tk, other=0.0).to(tl.float32)
        acc_qk += tl.dot(b_q, tl.trans(b_k), input_precision=PREC)
    g_cum, _ = _load_gate_cumsum(gcum_ptr, i_b, i_h, i_n, T, H, C)
    scores = acc_qk * _decay(g_cum, g_cum, o_c[:, None] >= o_c[None, :])
    p_off = o_c[:, None] * (H * C) + o_c[None, :]
    tl.store(scores_ptr + chunk_row * C + p_off, scores, mask=m_t[:, None])

    gamma_scale = tl.exp(g_cum.to(tl.float32)) * scale
    for v0 in range(0, VP, BV):
        o_v = v0 + tl.arange(0, BV)
        m_v = o_v < V
        m_tv = m_t[:, None] & m_v[None, :]
        off_v = o_c[:, None] * (H * V) + o_v[None, :]
        b_vn = tl.load(vn_ptr + chunk_row * V + off_v, mask=m_tv, other=0.0)
        acc_pv = tl.dot(scores, b_vn, input_precision=PREC)
        acc_qh = tl.zeros([C, BV], dtype=tl.float32)
        for k0 in range(0, KP, BK):
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
        b_o = acc_qh * gamma_scale[:, None] + acc_pv * scale
        tl.store(o_ptr + chunk_row * V + off_v, b_o.to(o_ptr.dtype.element_ty), mask=m_tv)
