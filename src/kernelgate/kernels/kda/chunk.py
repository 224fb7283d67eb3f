"""Autograd wrapper and launch logic for the chunked KDA kernels."""

from __future__ import annotations

import torch
import triton

from kernelgate.kernels._common import (
    apply_recurrence,
    fp32_state,
    recurrence_backward,
    recurrence_forward,
    round_up,
    state_buffer,
    tile_width,
)
from kernelgate.kernels._padding import StatePadding, zero_pad
from kernelgate.kernels._precision import dot_precision as _dot_precision
from kernelgate.kernels.gla.chunk import (
    CHUNK_SIZE,
    PAIR_BLOCK_K,
    SCAN_BLOCK,
    check_recurrence_inputs,
)
from kernelgate.kernels.kda.chunk_bwd import _dqk_bwd_kernel, _state_bwd_kernel, _wy_bwd_kernel
from kernelgate.kernels.kda.chunk_fwd import _output_fwd_kernel, _state_fwd_kernel, _wy_fwd_kernel

# Fixed launch configurations (no autotuning). output_fwd runs 8 warps where 4 spilled
# registers in the offline sm_90 compile at K = V = 128 (benchmarks/gla_kda_resources.py,
# docs/kernels/kda.md).
#
# Why the two backward kernels below are configured as they are: ptxas, given no register
# limit, picks its own register target and spills what does not fit it. With IEEE dots every
# spill of these two kernels sat at exactly 128 registers, the count at which one more CTA
# fits an SM (65,536 registers: two 256-thread CTAs or four 128-thread ones), where they need
# a little more. It is ptxas's trade, not a shortage: with ``.maxnreg 255`` (the hardware
# limit, so no new limit) the K = 32 compiles of both are spill-free at 157-205. Which
# specializations it hits moves with H, K and V (address arithmetic) and with the Triton
# version, so a shape CMP-03 draws (H = 3, odd K and V padded to multiples of 4) can meet
# one. At 8 warps _wy_bwd_kernel needs about 140-200 registers, and Triton 3.6 cut it to 128
# with 4-20 spill bytes at K = 32 (V = 16 with H = 2 or 3; V = 128) and at K = 48, V = 64 and
# K = 96, V = 48 (H = 3). At 4 warps it takes 234-255 and is spill-free under Triton 3.6 and
# 3.9 at every K, V and H swept (docs/kernels/kda.md lists them; 255 leaves no headroom, so a
# change to the kernel must be swept again). K = V = 128 takes 246 (3.6) / 244 (3.9)
# registers there, against 157 / 156 at 8 warps: two 4-warp CTAs an SM where one 8-warp CTA
# fitted, the same warps an SM (to be timed on the device, benchmarks/gla_kda.py).
NUM_WARPS = {
    "wy_fwd": 4,
    "state_fwd": 4,
    "output_fwd": 8,
    "state_bwd": 4,
    "dqk_bwd": 4,
    "wy_bwd": 4,
}
# _wy_bwd_kernel with TF32 dots (SIXTEEN_BIT_COMPUTE = "tf32": 16-bit inputs as they are,
# for speed comparisons only) keeps 8 warps: its tensor-core dots take fewer registers, and at
# 4 warps Triton 3.9 spilled 4-12 bytes at 178-188 registers in 14 of its 18 specializations
# for K in {32, 64, 128}, V in {16, 32, 128}, H in {1, 2} (K = V = 128 included); at 8 warps
# none spills under 3.9 or 3.6 (169-196 registers). IEEE and TF32x3 dots need the 4 warps
# above (TF32x3: 223-241 registers, spill-free at 4 and at 8).
TF32_WY_BWD_WARPS = 8
# _dqk_bwd_kernel with a 16-wide V tile (V <= 16, one tile: its V loop folds away) needs a
# little over 128 registers at 4 warps (140 in Triton 3.9) and Triton 3.6 capped it at 128
# with 4 spill bytes at H = 2 (K = 32, 128, 256); at 8 warps it takes 88-97 in both
# Tritons. Wider tiles keep 4 warps (126-176, spill-free in both at every K, V, H above);
# 8 warps everywhere is no remedy, since Triton 3.9 then caps V = 48 at 84 registers and
# spills 4 bytes.
NARROW_DQK_BWD_WARPS = 8
# The forward scan with a 16-wide V tile (V <= 16) runs 8 warps: at 4, Triton 3.9's sm_90
# compile spills 4 bytes at V = 1 with an initial state for every K >= 32 (Triton 3.6: none);
# at 8 warps neither spills for K in {1, 31, 32, 64, 128, 256}, V in {1, 16}, with or
# without initial and final state (examples/kda_backward's RES-02, docs/kernels/kda.md).
NARROW_STATE_FWD_WARPS = 8
# Row tile of the scans' state reads and writes (the state lives in the chunk-state buffer).
# Its loop stop is passed as round_up(K, SCAN_ROWS), a runtime value that is never 1 (see
# _common.round_up).
SCAN_ROWS = 16
# The narrowest K the kernels are launched at (narrower K is zero-padded, see kda_padding).
MIN_PADDED_K = 32
# The narrowest V they are launched at (one 16-wide V tile: narrower V gains nothing).
MIN_PADDED_V = 16


def chunk_kda_fwd(q, k, v, g, beta, scale, initial_state, output_final_state):
    """Launch the WY, scan and output kernels; returns o, the final state and what the
    backward reads (Tinv, W, chunk states, Vn, P)."""
    batch, seq_len, heads, dim_k = q.shape
    dim_v = v.shape[-1]
    num_chunks = triton.cdiv(seq_len, CHUNK_SIZE)
    prec = _dot_precision(q.dtype)
    block_v = tile_width(dim_v, SCAN_BLOCK)
    scan_v = block_v
    scan_rows = tile_width(dim_k, SCAN_ROWS)
    f32 = dict(device=q.device, dtype=torch.float32)

    tinv = torch.empty(batch, seq_len, heads, CHUNK_SIZE, **f32)
    w = torch.empty(batch, seq_len, heads, dim_k, **f32)
    u = torch.empty(batch, seq_len, heads, dim_v, **f32)
    _wy_fwd_kernel[(num_chunks, batch * heads)](
        k,
        v,
        g,
        beta,
        tinv,
        w,
        u,
        seq_len,
        H=heads,
        K=dim_k,
        V=dim_v,
        C=CHUNK_SIZE,
        BK=PAIR_BLOCK_K,
        BV=block_v,
        NK=triton.cdiv(dim_k, PAIR_BLOCK_K),
        NV=triton.cdiv(dim_v, block_v),
        PREC=prec,
        num_warps=NUM_WARPS["wy_fwd"],
    )
    states = torch.empty(batch, num_chunks, heads, dim_k, dim_v, **f32)
    v_new = torch.empty(batch, seq_len, heads, dim_v, **f32)
    final_state = state_buffer(output_final_state, (batch, heads, dim_k, dim_v), q.device)
    h0 = fp32_state(initial_state)
    _state_fwd_kernel[(triton.cdiv(dim_v, scan_v), batch * heads)](
        k,
        g,
        w,
        u,
        h0 if h0 is not None else states,
        states,
        v_new,
        final_state if final_state is not None else states,
        seq_len,
        num_chunks,
        round_up(dim_k, scan_rows),
        H=heads,
        K=dim_k,
        V=dim_v,
        C=CHUNK_SIZE,
        RK=scan_rows,
        BV=scan_v,
        HAS_H0=h0 is not None,
        STORE_HT=final_state is not None,
        PREC=prec,
        num_warps=NARROW_STATE_FWD_WARPS if scan_v == 16 else NUM_WARPS["state_fwd"],
    )
    del u
    o = torch.empty_like(v)
    scores = torch.empty(batch, seq_len, heads, CHUNK_SIZE, **f32)
    _output_fwd_kernel[(triton.cdiv(dim_v, block_v), num_chunks, batch * heads)](
        q,
        k,
        g,
        states,
        v_new,
        o,
        scores,
        seq_len,
        num_chunks,
        scale,
        H=heads,
        K=dim_k,
        V=dim_v,
        C=CHUNK_SIZE,
        BK=PAIR_BLOCK_K,
        BV=block_v,
        NK=triton.cdiv(dim_k, PAIR_BLOCK_K),
        PREC=prec,
        num_warps=NUM_WARPS["output_fwd"],
    )
    return o, final_state, (tinv, w, states, v_new, scores)


def chunk_kda_bwd(q, k, v, g, beta, scale, has_initial_state, saved, do, dht):
    """Launch the reverse scan, the dq/dk and the WY backward kernels; returns dq, dk, dv,
    dg, dbeta, dh0."""
    tinv, w, states, v_new, scores = saved
    batch, seq_len, heads, dim_k = q.shape
    dim_v = v.shape[-1]
    num_chunks = triton.cdiv(seq_len, CHUNK_SIZE)
    prec = _dot_precision(q.dtype)
    block_v = tile_width(dim_v, SCAN_BLOCK)
    scan_v = block_v
    scan_rows = tile_width(dim_k, SCAN_ROWS)
    f32 = dict(device=q.device, dtype=torch.float32)

    d_states = torch.empty_like(states)
    d_v_new = torch.empty_like(v_new)
    dh0 = state_buffer(has_initial_state, (batch, heads, dim_k, dim_v), q.device)
    dht = fp32_state(dht)
    _state_bwd_kernel[(triton.cdiv(dim_v, scan_v), batch * heads)](
        q,
        k,
        g,
        w,
        scores,
        do,
        dht if dht is not None else d_states,
        d_states,
        d_v_new,
        dh0 if dh0 is not None else d_states,
        seq_len,
        num_chunks,
        round_up(dim_k, scan_rows),
        scale,
        H=heads,
        K=dim_k,
        V=dim_v,
        C=CHUNK_SIZE,
        RK=scan_rows,
        BV=scan_v,
        HAS_DHT=dht is not None,
        STORE_DH0=dh0 is not None,
        PREC=_dot_precision(q.dtype, "kda._state_bwd_kernel"),
        num_warps=NUM_WARPS["state_bwd"],
    )
    dq = torch.empty_like(q)
    dk_part = torch.empty(batch, seq_len, heads, dim_k, **f32)
    dg_part = torch.empty_like(dk_part)
    dw = torch.empty_like(dk_part)
    _dqk_bwd_kernel[(triton.cdiv(dim_k, PAIR_BLOCK_K), num_chunks, batch * heads)](
        q,
        k,
        g,
        states,
        d_states,
        v_new,
        d_v_new,
        do,
        dq,
        dk_part,
        dg_part,
        dw,
        seq_len,
        num_chunks,
        scale,
        H=heads,
        K=dim_k,
        V=dim_v,
        C=CHUNK_SIZE,
        BK=PAIR_BLOCK_K,
        BV=block_v,
        NV=triton.cdiv(dim_v, block_v),
        PREC=prec,
        num_warps=NARROW_DQK_BWD_WARPS if block_v == 16 else NUM_WARPS["dqk_bwd"],
    )
    dk, dv, dg, dbeta = (torch.empty_like(x) for x in (k, v, g, beta))
    _wy_bwd_kernel[(num_chunks, batch * heads)](
        k,
        v,
        g,
        beta,
        tinv,
        dw,
        d_v_new,
        dk_part,
        dg_part,
        dk,
        dv,
        dg,
        dbeta,
        seq_len,
        H=heads,
        K=dim_k,
        V=dim_v,
        C=CHUNK_SIZE,
        BK=PAIR_BLOCK_K,
        BV=block_v,
        NK=triton.cdiv(dim_k, PAIR_BLOCK_K),
        NV=triton.cdiv(dim_v, block_v),
        PREC=prec,
        num_warps=TF32_WY_BWD_WARPS if prec == "tf32" else NUM_WARPS["wy_bwd"],
    )
    return dq, dk, dv, dg, dbeta, dh0


def kda_padding(k: torch.Tensor, v: torch.Tensor, *row_dtypes: torch.dtype) -> StatePadding:
    """The padded widths of K and V: each aligned (kernelgate.kernels._padding), and K at
    least MIN_PADDED_K. Aligning alone left K = 1 at K = 4, where Triton 3.6's sm_90 compile
    of ``_state_bwd_kernel`` still spilled 4-8 bytes (with dht and dh0, V = 4 or 16); K = 16
    spilled 4 bytes too (3.9's ``_state_fwd_kernel`` at V = 4, 8 warps; 3.6's reverse scan);
    K = 32 is spill-free with every V swept. V is at least MIN_PADDED_V: V = 1 launched as
    V = 4 made Triton 3.9 spill 60 bytes in ``_wy_bwd_kernel`` (H = 1, K = 32), none at
    V = 16. Only K < 32 and V < 16 pay (a copy; V's 16-wide tile is the same)."""
    pad = StatePadding.of(k.shape[-1], v.shape[-1], (k.dtype, *row_dtypes), (v.dtype,))
    return StatePadding(
        pad.rows, pad.cols, max(pad.rows_wide, MIN_PADDED_K), max(pad.cols_wide, MIN_PADDED_V)
    )


class ChunkKDAFunction(torch.autograd.Function):
    """Forward saves the chunk intermediates (fp32 Tinv, W, chunk states, deltas and masked
    scores) so the backward recomputes nothing sequential except its own reverse scan.

    K and V of a width that is not a multiple of 4 (8 for 16-bit kernel inputs), K below 32
    and V below 16 are zero-padded around the kernels (kda_padding; a copy of q, k, g, v
    and the states only then): at such widths Triton's sm_90 compile of the two scans fell
    back to scalar loads and spilled 4-12 bytes (RES-02; docs/kernels/kda.md).
    The padding is exact: padded key channels have k = q = 0 and g = 0, so their state rows
    stay zero under ``(I - beta k k^T) diag(exp(g))``; padded value columns have v = 0, so
    their state columns stay zero; neither reaches o, and both are cut off the results and
    the gradients."""

    @staticmethod
    def forward(ctx, q, k, v, g, beta, scale, initial_state, output_final_state):
        pad = kda_padding(k, v, q.dtype, g.dtype)
        q, k, g = (zero_pad(x, pad.rows_wide) for x in (q, k, g))
        v = zero_pad(v, pad.cols_wide)
        initial_state = pad.pad_state(initial_state)
        inputs = (q, k, v, g, beta)
        o, final_state = recurrence_forward(
            ctx, chunk_kda_fwd, inputs, scale, initial_state, output_final_state
        )
        ctx.pad = pad
        return pad.cut_forward(o, final_state)

    @staticmethod
    def backward(ctx, do, dht):
        pad = ctx.pad
        do, dht = pad.pad_cotangents(do, dht)
        dq, dk, dv, dg, dbeta, dh0 = recurrence_backward(ctx, chunk_kda_bwd, do, dht)
        dq, dk, dg = (x[..., : pad.rows] for x in (dq, dk, dg))
        dv = dv[..., : pad.cols]
        return dq, dk, dv, dg, dbeta, None, pad.cut_state(dh0), None


def chunk_kda(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Kimi Delta Attention, chunked (chunk size 16), forward and backward in Triton.

    ``S_t = (I - beta_t k_t k_t^T) diag(exp(g_t)) S_{t-1} + beta_t k_t v_t^T``,
    ``o_t = S_t^T (scale q_t)``: gdn's gated delta rule with a per-key-channel decay.

    Args:
        q, k: [B, T, H, K] (K <= 256). v: [B, T, H, V]. g: [B, T, H, K], the per-key-channel
            log decay. beta: [B, T, H]. fp32, fp16 or bf16; the state and all accumulation
            are fp32, and by default 16-bit inputs are computed as fp32 copies (see
            kernels/_precision.py). Safe range of g: any finite g <= 0 (every decay factor
            formed is then <= 1); positive g only while one chunk's sum stays below 88
            (g < 5.5 per step). The recurrence itself is stable while beta |k|^2 <= 2
            (models normalise k). The contract (examples/kda/contract.toml) admits g in
            [-20, 0], beta in [0, 1] and |k_i| <= 1/16.
        scale: query scale, K ** -0.5 by default.
        initial_state: optional [B, H, K, V] state entering step 0 (used in fp32).
        output_final_state: also return the state after the last step.

    Returns:
        (o, final_state): o [B, T, H, V] in v's dtype; final_state [B, H, K, V] fp32, or None
        when ``output_final_state`` is False. Differentiable in q, k, v, g, beta and
        initial_state; deterministic (no atomics, fixed launch configurations).
    """
    batch_time_heads = tuple(q.shape[:3])
    check_recurrence_inputs(
        "chunk_kda",
        q,
        k,
        v,
        {"g": (g, tuple(q.shape)), "beta": (beta, batch_time_heads)},
        initial_state,
    )
    return apply_recurrence(
        ChunkKDAFunction,
        q,
        k,
        v,
        g,
        beta,
        scale=scale,
        initial_state=initial_state,
        output_final_state=output_final_state,
    )
