"""Autograd wrapper and launch logic for the chunked Gated DeltaNet kernels."""

from __future__ import annotations

import torch
import triton

from kernelgate.kernels._common import (
    apply_recurrence,
    check_head_dim,
    check_initial_state,
    check_length,
    check_qkv,
    fp32_state,
    recurrence_backward,
    recurrence_forward,
    round_up,
    state_buffer,
    tile_width,
)
from kernelgate.kernels._padding import StatePadding, zero_pad
from kernelgate.kernels._precision import dot_precision as _dot_precision
from kernelgate.kernels.gdn.chunk_bwd import (
    _dscores_bwd_kernel,
    _gate_bwd_kernel,
    _qk_bwd_kernel,
    _state_bwd_kernel,
    _wy_da_bwd_kernel,
    _wy_dkv_bwd_kernel,
)
from kernelgate.kernels.gdn.chunk_bwd_fast import (
    _dqk_fast_kernel,
    _wy_da_fast_kernel,
    _wy_dkv_fast_kernel,
)
from kernelgate.kernels.gdn.chunk_fwd import (
    _output_fwd_kernel,
    _state_fwd_kernel,
    _wy_apply_fwd_kernel,
    _wy_fwd_kernel,
)
from kernelgate.kernels.gdn.chunk_fwd_fast import (
    _output_fast_kernel,
    _scan_fast_kernel,
    _wy_fast_kernel,
)

CHUNK_SIZE = 64
SUB_BLOCK = 16  # the WY inverse works on block rows of 16 steps of the 64 x 64 chunk matrix
MAX_HEAD_DIM_K = 256  # the largest K the kernels are verified for
# Fixed launch configurations (no autotuning: its choice can differ between runs, and it
# cannot run under the CPU interpreter). Module-level so benchmarks/gdn.py --profile can try
# alternatives. The forward kernels use 8 warps: with 4, their fp32 (FMA) dots need more
# than 255 registers at some head sizes when compiled for sm_90 (tests/kernels/test_gdn.py
# checks the offline compile); every test passed compiled on an H200 with these settings.
NUM_WARPS = {
    "wy_fwd": 8,
    "wy_apply_fwd": 8,
    "state_fwd": 8,
    "output_fwd": 8,
    "state_bwd": 8,
    "dscores_bwd": 8,
    "qk_bwd": 8,
    "wy_da_bwd": 8,
    "wy_dkv_bwd": 8,
    "gate_bwd": 4,
}
SCAN_BLOCK_V: int | None = None  # None: pick by _scan_block_v's rule
# Largest [K, BV] state tile of one scan program, in elements (a cap on the V tile at large
# K, so that one program's share of the state stays small).
MAX_SCAN_TILE = 4096
# Reduction length of one tl.dot over K or over chunk steps (see chunk_fwd.py: fp32 dots
# reading both operands from memory compile without spills at these sizes).
REDUCE_BLOCK = 32


# Which forward runs: "staged" (chunk_fwd.py: the verified kernels, every dot operand staged
# through global memory, IEEE fp32 dots) or "registers" (chunk_fwd_fast.py: three kernels with
# register operands and tf32x3 dots, opt-in until timed and verified on the device). A module
# attribute read at every call, like kernels/_precision.FP32_DOTS, so benchmarks/gdn.py
# --forward can switch it; both return the same intermediates, so the backward is the same.
FORWARD = "staged"
FORWARD_CHOICES = ("staged", "registers")
# Launch configurations of the "registers" forward (offline sm_90 figures:
# benchmarks/results/gdn-fwd-fast-resources-cpu.json). The scan's V tile, state split and
# pipelining are the register prototype's spill-free choice at K = 128 (BV = 16, NK = 2, 4
# warps, 2 stages: benchmarks/gdn_scan_registers.py); FAST_SCAN_ROWS is the largest row tile
# of the state (NK = K / FAST_SCAN_ROWS, at most 4).
# None: by ``fast_num_warps``'s rule (from the same figures).
FAST_NUM_WARPS: dict[str, int | None] = {"wy_fast": None, "scan_fast": None, "output_fast": 8}
FAST_NUM_STAGES = {"wy_fast": 2, "scan_fast": 2, "output_fast": 2}
FAST_SCAN_BLOCK_V = 16
FAST_SCAN_ROWS = 64
# Column tiles (of K and V) of the per-chunk kernels: "wy_kk" the reduction tile of K K^T,
# "wy_fast" W's and U's column tiles, "output_fast" the K and V tiles of the output.
FAST_BLOCK = {"wy_kk": 64, "wy_fast": 64, "output_fast": 32}


# How 16-bit (bf16, fp16) inputs are computed is one setting for the whole family:
# kernelgate.kernels._precision.SIXTEEN_BIT_COMPUTE ("fp32" copies by default; "tf32" runs the
# kernels' own 16-bit path, whose TF32 dots on fp32 intermediates left dg and dh0 60-162x
# outside the bf16 backward contract's bound on the H200). See that module.


# Which backward runs after the shipped reverse scan (_state_bwd_kernel, kept in both):
# "staged" (chunk_bwd.py: five chunk-parallel kernels, operands staged through global memory,
# IEEE fp32 dots) or "registers" (chunk_bwd_fast.py: three kernels with register operands and
# tf32x3 dots, opt-in until timed and verified on the device). Read at every call, like
# FORWARD, so benchmarks/gdn.py --backward can switch it.
BACKWARD = "staged"
BACKWARD_CHOICES = ("staged", "registers")
# Launch configuration of the "registers" backward: column tile width of K and V (capped by
# their padded sizes), warps and pipeline stages (offline sm_90 figures:
# benchmarks/results/gdn-bwd-fast-resources-cpu.json).
FAST_BWD_BLOCK = {"dqk_fast": 32, "wy_da_fast": 32, "wy_dkv_fast": 32}
# The cap on those tiles where a row of K or V is not a whole number of 16-byte fp32 vectors
# (K or V not a multiple of 4). Rows of such a length get one-element loads and stores, and
# with 32-wide tiles _dqk_fast_kernel and _wy_da_fast_kernel spilled 24-256 bytes on sm_90 at
# K = V = 31, (31, 32) and (1, 32); with 16 every kernel of the three is spill-free at those
# sizes and at 17, 33, 63, 65, 127 (docs/kernels/gdn.md, "Other head sizes"). Aligned sizes
# (20, 24 included) keep FAST_BWD_BLOCK.
FAST_BWD_UNALIGNED_BLOCK = 16
FAST_BWD_NUM_WARPS = {"dqk_fast": 8, "wy_da_fast": 8, "wy_dkv_fast": 8}
FAST_BWD_NUM_STAGES = {"dqk_fast": 1, "wy_da_fast": 1, "wy_dkv_fast": 2}


def _scan_block_v(dim_k: int, dim_v: int) -> int:
    """V-tile of the two sequential scans (one program per (batch, head, V tile)).

    Every V-tile program of a head reloads that chunk's full q, k, W rows, so narrow tiles buy
    parallelism with redundant loads. Measured on the H200 at B=2, H=16, K=V=128, T=4096
    (fwd+bwd): 16 -> 3.83 ms, 32 -> 3.10 ms; 64 exceeds shared memory in the backward scan
    with the default pipelining. The tile is also capped so that the [K, BV] state stays within
    MAX_SCAN_TILE elements (16 at K = 256). A fixed choice, not autotuning (whose pick can
    change between runs and which cannot run under the CPU interpreter).
    """
    cap = 32 if SCAN_BLOCK_V is None else SCAN_BLOCK_V
    return tile_width(dim_v, min(cap, max(16, MAX_SCAN_TILE // tile_width(dim_k, MAX_HEAD_DIM_K))))


def _check_inputs(q, k, v, g, beta, initial_state) -> None:
    """Gated DeltaNet's shape checks; its messages print torch.Size, as they always have."""
    check_qkv(q, k, v, shape_text=torch.Size)
    if g.shape != q.shape[:3] or beta.shape != q.shape[:3]:
        raise ValueError(f"expected g and beta [B,T,H], got {g.shape}, {beta.shape}")
    check_head_dim(q, MAX_HEAD_DIM_K)
    check_length(q)
    batch, _, heads, dim_k = q.shape
    check_initial_state(initial_state, (batch, heads, dim_k, v.shape[-1]))


def chunk_gated_delta_rule_fwd(q, k, v, g, beta, scale, initial_state, output_final_state):
    """Launch the forward kernels (``FORWARD`` picks which); returns o, the final state and
    what backward needs."""
    if FORWARD not in FORWARD_CHOICES:
        raise ValueError(f"FORWARD must be one of {FORWARD_CHOICES}, not {FORWARD!r}")
    if FORWARD == "registers":
        return chunk_gated_delta_rule_fwd_registers(
            q, k, v, g, beta, scale, initial_state, output_final_state
        )
    batch, seq_len, heads, dim_k = q.shape
    dim_v = v.shape[-1]
    num_chunks = triton.cdiv(seq_len, CHUNK_SIZE)
    prec = _dot_precision(q.dtype)
    block_k = tile_width(dim_k, 64)
    block_v = tile_width(dim_v, 64)
    reduce_k = tile_width(dim_k, REDUCE_BLOCK)
    out_block_v = tile_width(dim_v, 32)
    scan_block_v = _scan_block_v(dim_k, dim_v)
    f32 = dict(device=q.device, dtype=torch.float32)

    # fp64 cumulative gates: decays are exp(G_i - G_j), and with strong decays |G| reaches
    # hundreds inside a chunk, where fp32 sums would lose the small differences.
    g_cum = torch.empty(batch, seq_len, heads, device=q.device, dtype=torch.float64)
    a_inv = torch.empty(batch, seq_len, heads, CHUNK_SIZE, **f32)
    w = torch.empty(batch, seq_len, heads, dim_k, **f32)
    u = torch.empty(batch, seq_len, heads, dim_v, **f32)
    t_beta = torch.empty_like(a_inv)  # scratch: Tinv diag(beta), Tinv diag(beta gamma)
    t_beta_gamma = torch.empty_like(a_inv)
    _wy_fwd_kernel[(num_chunks, batch * heads)](
        k,
        g,
        beta,
        g_cum,
        a_inv,
        t_beta,
        t_beta_gamma,
        seq_len,
        H=heads,
        K=dim_k,
        C=CHUNK_SIZE,
        S=SUB_BLOCK,
        BK=block_k,
        K_END=round_up(dim_k, block_k),
        PREC=prec,
        num_warps=NUM_WARPS["wy_fwd"],
    )
    for scaled_tinv, x, out, dim, block in (
        (t_beta_gamma, k, w, dim_k, block_k),  # W = Tinv diag(beta gamma) K
        (t_beta, v, u, dim_v, block_v),  # U = Tinv diag(beta) V
    ):
        _wy_apply_fwd_kernel[(num_chunks, batch * heads)](
            scaled_tinv,
            x,
            out,
            seq_len,
            H=heads,
            D=dim,
            C=CHUNK_SIZE,
            RC=REDUCE_BLOCK,
            BD=block,
            D_END=round_up(dim, block),
            PREC=prec,
            num_warps=NUM_WARPS["wy_apply_fwd"],
        )
    del t_beta, t_beta_gamma

    states = torch.empty(batch, num_chunks, heads, dim_k, dim_v, **f32)
    v_new = torch.empty(batch, seq_len, heads, dim_v, **f32)
    final_state = state_buffer(output_final_state, (batch, heads, dim_k, dim_v), q.device)
    h0 = fp32_state(initial_state)
    scan_tiles = triton.cdiv(dim_v, scan_block_v)
    decayed_deltas = torch.empty(batch * heads * scan_tiles, CHUNK_SIZE, scan_block_v, **f32)
    _state_fwd_kernel[(scan_tiles, batch * heads)](
        k,
        w,
        u,
        g_cum,
        h0 if h0 is not None else w,
        states,
        v_new,
        final_state if final_state is not None else w,
        decayed_deltas,
        seq_len,
        num_chunks,
        round_up(dim_k, reduce_k),
        H=heads,
        K=dim_k,
        V=dim_v,
        C=CHUNK_SIZE,
        RK=reduce_k,
        RC=REDUCE_BLOCK,
        BV=scan_block_v,
        HAS_H0=h0 is not None,
        STORE_HT=final_state is not None,
        PREC=prec,
        num_warps=NUM_WARPS["state_fwd"],
    )
    del decayed_deltas

    o = torch.empty_like(v)
    scores = torch.empty(batch, seq_len, heads, CHUNK_SIZE, **f32)
    q_states = torch.empty(batch, seq_len, heads, dim_v, **f32)  # scratch: Q H per chunk
    _output_fwd_kernel[(num_chunks, batch * heads)](
        q,
        k,
        v_new,
        g_cum,
        states,
        o,
        scores,
        q_states,
        seq_len,
        num_chunks,
        scale,
        round_up(dim_k, reduce_k),
        round_up(dim_v, out_block_v),
        H=heads,
        K=dim_k,
        V=dim_v,
        C=CHUNK_SIZE,
        RC=REDUCE_BLOCK,
        BK=reduce_k,
        BV=out_block_v,
        PREC=prec,
        num_warps=NUM_WARPS["output_fwd"],
    )
    return o, final_state, (g_cum, a_inv, w, states, v_new, scores)


def fast_scan_split(dim_k: int) -> tuple[int, int]:
    """(BKS, NK) of the register scan: the state's K rows (padded to a power of two >= 16)
    as NK row tiles of BKS rows, BKS at most FAST_SCAN_ROWS and NK at most 4."""
    padded = tile_width(dim_k, MAX_HEAD_DIM_K)
    rows = max(min(FAST_SCAN_ROWS, padded), padded // 4)
    return rows, padded // rows


def fast_num_warps(name: str, dim_k: int) -> int:
    """num_warps of a "registers" forward kernel: ``FAST_NUM_WARPS[name]`` unless None, else
    the rule the offline sm_90 figures gave (benchmarks/gdn_fwd_fast_resources.py --configs,
    Triton 3.9 and 3.6). ``_wy_fast_kernel``: 4 warps up to K = 64 (204-254 registers, no
    spills, where 8 warps spilled 8 bytes at K = V = 31), 8 above (4 warps spilled 4-20
    bytes at K = 128 and 256). ``_scan_fast_kernel``: 4 warps when K is a power of two (no
    masked state rows: 166-235 registers), 8 otherwise (4 warps spilled 4 bytes at K = 31
    with Triton 3.6; 8 warps: 178-244 registers and no spills at every size measured)."""
    warps = FAST_NUM_WARPS[name]
    if warps is not None:
        return warps
    padded_k = tile_width(dim_k, MAX_HEAD_DIM_K)
    if name == "wy_fast":
        return 4 if padded_k <= 64 else 8
    return 4 if padded_k == dim_k else 8


def fast_tiles(
    dim_k: int, dim_v: int, widths: dict[str, int]
) -> tuple[int, int, dict[str, tuple[int, int]]]:
    """(KP, VP, tiles) of the "registers" kernels: K and V padded to the powers of two their
    tiles cover, and each named (K, V) column tile of ``widths`` capped by them. One rule for
    the forward's FAST_BLOCK and the backward's FAST_BWD_BLOCK."""
    padded_k = tile_width(dim_k, MAX_HEAD_DIM_K)
    padded_v = triton.next_power_of_2(max(dim_v, 16))
    tiles = {name: (min(padded_k, width), min(padded_v, width)) for name, width in widths.items()}
    return padded_k, padded_v, tiles


def fast_bwd_widths(dim_k: int, dim_v: int) -> dict[str, int]:
    """FAST_BWD_BLOCK, capped at FAST_BWD_UNALIGNED_BLOCK when K or V is not a multiple of 4:
    rows that are not whole 16-byte vectors load one element per instruction, each with its
    own address and predicate, and the 32-wide tiles of the two heavy kernels then need more
    than 255 registers (the cap costs twice the tile loop trips, copies nothing)."""
    if dim_k % 4 == 0 and dim_v % 4 == 0:
        return dict(FAST_BWD_BLOCK)
    return {name: min(width, FAST_BWD_UNALIGNED_BLOCK) for name, width in FAST_BWD_BLOCK.items()}


def fast_precision(dtype: torch.dtype) -> str:
    """The dot precision of the "registers" forward: tf32x3 for fp32 inputs (IEEE with
    register operands spills on sm_90, chunk_fwd.py); TF32 for 16-bit inputs, whose values
    TF32 holds exactly (reached only with _precision.SIXTEEN_BIT_COMPUTE = "tf32")."""
    return "tf32x3" if dtype == torch.float32 else "tf32"


def chunk_gated_delta_rule_fwd_registers(
    q, k, v, g, beta, scale, initial_state, output_final_state
):
    """The "registers" forward (chunk_fwd_fast.py): three launches instead of five, the same
    return value and saved intermediates as the staged forward."""
    batch, seq_len, heads, dim_k = q.shape
    dim_v = v.shape[-1]
    num_chunks = triton.cdiv(seq_len, CHUNK_SIZE)
    prec = fast_precision(q.dtype)
    padded_k, padded_v, block = fast_tiles(dim_k, dim_v, FAST_BLOCK)
    f32 = dict(device=q.device, dtype=torch.float32)

    g_cum = torch.empty(batch, seq_len, heads, device=q.device, dtype=torch.float64)
    a_inv = torch.empty(batch, seq_len, heads, CHUNK_SIZE, **f32)
    w = torch.empty(batch, seq_len, heads, dim_k, **f32)
    u = torch.empty(batch, seq_len, heads, dim_v, **f32)
    grid = (num_chunks, batch * heads)
    _wy_fast_kernel[grid](
        k, v, g, beta, g_cum, a_inv, w, u, seq_len, heads,
        K=dim_k, V=dim_v, C=CHUNK_SIZE, S=SUB_BLOCK, KP=padded_k, VP=padded_v,
        RK=block["wy_kk"][0], BK=block["wy_fast"][0], BV=block["wy_fast"][1], PREC=prec,
        num_warps=fast_num_warps("wy_fast", dim_k), num_stages=FAST_NUM_STAGES["wy_fast"],
    )  # fmt: skip

    states = torch.empty(batch, num_chunks, heads, dim_k, dim_v, **f32)
    v_new = torch.empty(batch, seq_len, heads, dim_v, **f32)
    final_state = state_buffer(output_final_state, (batch, heads, dim_k, dim_v), q.device)
    h0 = fp32_state(initial_state)
    rows, split = fast_scan_split(dim_k)
    scan_block_v = min(FAST_SCAN_BLOCK_V, padded_v)
    _scan_fast_kernel[(triton.cdiv(dim_v, scan_block_v), batch * heads)](
        k, w, u, g_cum, h0 if h0 is not None else w, states, v_new,
        final_state if final_state is not None else w, seq_len, num_chunks, heads,
        K=dim_k, V=dim_v, C=CHUNK_SIZE, BKS=rows, NK=split, BV=scan_block_v,
        HAS_H0=h0 is not None, STORE_HT=final_state is not None, PREC=prec,
        num_warps=fast_num_warps("scan_fast", dim_k), num_stages=FAST_NUM_STAGES["scan_fast"],
    )  # fmt: skip

    o = torch.empty_like(v)
    scores = torch.empty(batch, seq_len, heads, CHUNK_SIZE, **f32)
    _output_fast_kernel[grid](
        q, k, v_new, g_cum, states, o, scores, seq_len, num_chunks, heads, scale,
        K=dim_k, V=dim_v, C=CHUNK_SIZE, KP=padded_k, VP=padded_v,
        BK=block["output_fast"][0], BV=block["output_fast"][1],
        PREC=prec,
        num_warps=fast_num_warps("output_fast", dim_k), num_stages=FAST_NUM_STAGES["output_fast"],
    )  # fmt: skip
    return o, final_state, (g_cum, a_inv, w, states, v_new, scores)


def chunk_gated_delta_rule_bwd(q, k, v, g, beta, scale, has_initial_state, saved, do, dht):
    """Launch the backward kernels (the reverse scan, then ``BACKWARD``'s chunk-parallel
    kernels); returns dq, dk, dv, dg, dbeta, dh0."""
    if BACKWARD not in BACKWARD_CHOICES:
        raise ValueError(f"BACKWARD must be one of {BACKWARD_CHOICES}, not {BACKWARD!r}")
    g_cum, a_inv, w, states, v_new, scores = saved
    batch, seq_len, heads, dim_k = q.shape
    dim_v = v.shape[-1]
    num_chunks = triton.cdiv(seq_len, CHUNK_SIZE)
    prec = _dot_precision(q.dtype)
    reduce_k = tile_width(dim_k, REDUCE_BLOCK)
    scan_block_v = _scan_block_v(dim_k, dim_v)
    f32 = dict(device=q.device, dtype=torch.float32)

    d_states = torch.empty(batch, num_chunks, heads, dim_k, dim_v, **f32)
    d_v_new = torch.empty(batch, seq_len, heads, dim_v, **f32)
    dh0 = state_buffer(has_initial_state, (batch, heads, dim_k, dim_v), q.device)
    dht = fp32_state(dht)
    scan_tiles = triton.cdiv(dim_v, scan_block_v)
    scaled_do = torch.empty(batch * heads * scan_tiles, 2 * CHUNK_SIZE, scan_block_v, **f32)
    _state_bwd_kernel[(scan_tiles, batch * heads)](
        q,
        k,
        w,
        g_cum,
        scores,
        do,
        dht if dht is not None else w,
        d_states,
        d_v_new,
        dh0 if dh0 is not None else w,
        scaled_do,
        seq_len,
        num_chunks,
        round_up(dim_k, reduce_k),
        scale,
        H=heads,
        K=dim_k,
        V=dim_v,
        C=CHUNK_SIZE,
        RK=reduce_k,
        RC=REDUCE_BLOCK,
        BV=scan_block_v,
        HAS_DHT=dht is not None,
        STORE_DH0=dh0 is not None,
        PREC=_dot_precision(q.dtype, "gdn._state_bwd_kernel"),
        num_warps=NUM_WARPS["state_bwd"],
    )
    del scaled_do
    if BACKWARD == "registers":
        dq, dk, dv, dg, dbeta = _chunk_bwd_registers(
            q, k, v, g, beta, scale, saved, do, d_states, d_v_new
        )
        return dq, dk, dv, dg, dbeta, dh0

    rk = reduce_k
    rv = tile_width(dim_v, REDUCE_BLOCK)
    k_end = round_up(dim_k, rk)
    v_end = round_up(dim_v, rv)
    d_scores = torch.empty(batch, seq_len, heads, CHUNK_SIZE, **f32)
    dg_cum_scores = torch.empty(batch, seq_len, heads, **f32)
    _dscores_bwd_kernel[(num_chunks, batch * heads)](
        do,
        v_new,
        scores,
        g_cum,
        d_scores,
        dg_cum_scores,
        seq_len,
        v_end,
        scale,
        H=heads,
        V=dim_v,
        C=CHUNK_SIZE,
        RV=rv,
        PREC=prec,
        num_warps=NUM_WARPS["dscores_bwd"],
    )

    num_k_tiles = triton.cdiv(dim_k, rk)
    num_v_tiles = triton.cdiv(dim_v, rv)
    dq = torch.empty_like(q)
    dk_part = torch.empty(batch, seq_len, heads, dim_k, **f32)
    dw = torch.empty(batch, seq_len, heads, dim_k, **f32)
    dg_cum_qk = torch.empty(num_k_tiles, batch, seq_len, heads, **f32)
    dg_last_qk = torch.empty(num_k_tiles, batch, num_chunks, heads, **f32)
    _qk_bwd_kernel[(num_k_tiles, num_chunks, batch * heads)](
        q,
        k,
        g_cum,
        states,
        d_states,
        v_new,
        d_v_new,
        do,
        d_scores,
        dq,
        dk_part,
        dw,
        dg_cum_qk,
        dg_last_qk,
        seq_len,
        num_chunks,
        batch,
        v_end,
        scale,
        H=heads,
        K=dim_k,
        V=dim_v,
        C=CHUNK_SIZE,
        RC=REDUCE_BLOCK,
        BK=rk,
        RV=rv,
        PREC=prec,
        num_warps=NUM_WARPS["qk_bwd"],
    )
    del d_scores

    # Scratch of the WY backward: dTinv (then P'), K K^T and Tinv^T dTinv per chunk.
    d_tinv = torch.empty(batch, seq_len, heads, CHUNK_SIZE, **f32)
    kk = torch.empty_like(d_tinv)
    m_scratch = torch.empty_like(d_tinv)
    dbeta_a = torch.empty(batch, seq_len, heads, **f32)
    dg_cum_a = torch.empty_like(dbeta_a)
    _wy_da_bwd_kernel[(num_chunks, batch * heads)](
        k,
        v,
        beta,
        g_cum,
        a_inv,
        dw,
        d_v_new,
        d_tinv,
        kk,
        m_scratch,
        dbeta_a,
        dg_cum_a,
        seq_len,
        k_end,
        v_end,
        H=heads,
        K=dim_k,
        V=dim_v,
        C=CHUNK_SIZE,
        RC=REDUCE_BLOCK,
        RK=rk,
        RV=rv,
        PREC=prec,
        num_warps=NUM_WARPS["wy_da_bwd"],
    )
    del kk, m_scratch

    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    num_tiles = num_k_tiles + num_v_tiles
    dbeta_part = torch.empty(num_tiles, batch, seq_len, heads, **f32)
    dg_cum_wy = torch.empty(num_k_tiles, batch, seq_len, heads, **f32)
    _wy_dkv_bwd_kernel[(num_tiles, num_chunks, batch * heads)](
        k,
        v,
        beta,
        g_cum,
        a_inv,
        dw,
        d_v_new,
        dk_part,
        d_tinv,
        dk,
        dv,
        dbeta_part,
        dg_cum_wy,
        seq_len,
        batch,
        num_k_tiles,
        H=heads,
        K=dim_k,
        V=dim_v,
        C=CHUNK_SIZE,
        RC=REDUCE_BLOCK,
        BK=rk,
        BV=rv,
        PREC=prec,
        num_warps=NUM_WARPS["wy_dkv_bwd"],
    )

    dbeta = torch.empty_like(beta)
    dg = torch.empty_like(g)
    _gate_bwd_kernel[(num_chunks, batch * heads)](
        g_cum,
        dbeta_a,
        dg_cum_a,
        dg_cum_scores,
        dg_cum_qk,
        dg_last_qk,
        dbeta_part,
        dg_cum_wy,
        dbeta,
        dg,
        seq_len,
        num_chunks,
        batch,
        NQK=num_k_tiles,
        NKT=num_k_tiles,
        NTILES=num_tiles,
        H=heads,
        C=CHUNK_SIZE,
        num_warps=NUM_WARPS["gate_bwd"],
    )
    return dq, dk, dv, dg, dbeta, dh0


def _chunk_bwd_registers(q, k, v, g, beta, scale, saved, do, d_states, d_v_new):
    """The chunk-parallel part of the "registers" backward (chunk_bwd_fast.py): three launches
    instead of five, after the shared reverse scan; returns dq, dk, dv, dg, dbeta."""
    g_cum, a_inv, _, states, v_new, scores = saved
    batch, seq_len, heads, dim_k = q.shape
    dim_v = v.shape[-1]
    num_chunks = triton.cdiv(seq_len, CHUNK_SIZE)
    prec = fast_precision(q.dtype)
    padded_k, padded_v, block = fast_tiles(dim_k, dim_v, fast_bwd_widths(dim_k, dim_v))
    f32 = dict(device=q.device, dtype=torch.float32)
    grid = (num_chunks, batch * heads)

    dq = torch.empty_like(q)
    dk_part = torch.empty(batch, seq_len, heads, dim_k, **f32)
    dw = torch.empty(batch, seq_len, heads, dim_k, **f32)
    dg_cum = torch.empty(batch, seq_len, heads, **f32)
    dg_last = torch.empty(batch, num_chunks, heads, **f32)
    _dqk_fast_kernel[grid](
        q, k, g_cum, states, d_states, v_new, d_v_new, do, scores,
        dq, dk_part, dw, dg_cum, dg_last, seq_len, num_chunks, heads, scale,
        K=dim_k, V=dim_v, C=CHUNK_SIZE, KP=padded_k, VP=padded_v,
        BK=block["dqk_fast"][0], BV=block["dqk_fast"][1], PREC=prec,
        num_warps=FAST_BWD_NUM_WARPS["dqk_fast"],
        num_stages=FAST_BWD_NUM_STAGES["dqk_fast"],
    )  # fmt: skip

    dbeta_a = torch.empty(batch, seq_len, heads, **f32)
    dg_cum_a = torch.empty_like(dbeta_a)
    _wy_da_fast_kernel[grid](
        k, v, beta, g_cum, a_inv, dw, d_v_new, dk_part, dbeta_a, dg_cum_a, seq_len, heads,
        K=dim_k, V=dim_v, C=CHUNK_SIZE, KP=padded_k, VP=padded_v,
        BK=block["wy_da_fast"][0], BV=block["wy_da_fast"][1], PREC=prec,
        num_warps=FAST_BWD_NUM_WARPS["wy_da_fast"],
        num_stages=FAST_BWD_NUM_STAGES["wy_da_fast"],
    )  # fmt: skip

    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    dbeta = torch.empty_like(beta)
    dg = torch.empty_like(g)
    _wy_dkv_fast_kernel[grid](
        k, v, beta, g_cum, a_inv, dw, d_v_new, dk_part, dbeta_a, dg_cum_a, dg_cum, dg_last,
        dk, dv, dbeta, dg, seq_len, num_chunks, heads,
        K=dim_k, V=dim_v, C=CHUNK_SIZE, KP=padded_k, VP=padded_v,
        BK=block["wy_dkv_fast"][0], BV=block["wy_dkv_fast"][1], PREC=prec,
        num_warps=FAST_BWD_NUM_WARPS["wy_dkv_fast"],
        num_stages=FAST_BWD_NUM_STAGES["wy_dkv_fast"],
    )  # fmt: skip
    return dq, dk, dv, dg, dbeta


# Head sizes up to this run the "registers" forward unpadded even where K or V is not a
# multiple of 4 (registers_padding says why).
REGISTERS_PAD_ABOVE = 32


def registers_padding(q: torch.Tensor, v: torch.Tensor) -> StatePadding | None:
    """The zero-padding of K and V to 16-byte rows (kernels/_padding.py) around the
    "registers" forward where K or V is not a multiple of 4 and either exceeds
    REGISTERS_PAD_ABOVE; None otherwise, and always under the staged forward.

    Rows that are not whole 16-byte vectors load one element per instruction, each with its
    own address: at K = V in {33, 63, 65, 127} the register scan then spilled 20-244 bytes
    and the output kernel 68-144 (offline sm_90), and no launch setting tried removed the
    scan's; padded (to 36, 64, 68, 128) every kernel of both registers paths compiles
    without spills. Up to 32 the unpadded kernels are spill-free (K = V = 31, 17, 6, (31, 32),
    (1, 32), (32, 1)), and padding would only add copies, or worse: K = V = 5-7 would meet
    the shipped reverse scan's 8-byte spill at K = V = 8. Figures: docs/kernels/gdn.md,
    "Other head sizes". The padding is exact: zero key and query channels change no k.k or
    q.S, zero value channels keep their state columns at zero, and all are cut off the
    results; it copies q, k, v, the states, o and the incoming gradients."""
    dim_k, dim_v = q.shape[-1], v.shape[-1]
    if FORWARD != "registers" or max(dim_k, dim_v) <= REGISTERS_PAD_ABOVE:
        return None
    pad = StatePadding.of(dim_k, dim_v, (q.dtype,), (v.dtype,))
    return pad if (pad.rows_wide, pad.cols_wide) != (dim_k, dim_v) else None


class ChunkGatedDeltaRuleFunction(torch.autograd.Function):
    """Forward saves the chunk intermediates (fp64 cumulative gates; fp32 Tinv, W, chunk
    states, deltas and decayed scores) so the backward recomputes nothing sequential except
    its own reverse scan. Under the "registers" forward, odd head sizes run zero-padded
    (registers_padding), forward and backward alike: the intermediates are the padded run's."""

    @staticmethod
    def forward(ctx, q, k, v, g, beta, scale, initial_state, output_final_state):
        pad = ctx.pad = registers_padding(q, v)
        if pad is not None:
            q, k = zero_pad(q, pad.rows_wide), zero_pad(k, pad.rows_wide)
            v = zero_pad(v, pad.cols_wide)
            initial_state = pad.pad_state(initial_state)
        inputs = (q, k, v, g, beta)
        fwd = chunk_gated_delta_rule_fwd
        o, final_state = recurrence_forward(
            ctx, fwd, inputs, scale, initial_state, output_final_state
        )
        return (o, final_state) if pad is None else pad.cut_forward(o, final_state)

    @staticmethod
    def backward(ctx, do, dht):
        pad = ctx.pad
        if pad is not None:
            do, dht = pad.pad_cotangents(do, dht)
        dq, dk, dv, dg, dbeta, dh0 = recurrence_backward(ctx, chunk_gated_delta_rule_bwd, do, dht)
        if pad is not None:
            dq, dk, dv = dq[..., : pad.rows], dk[..., : pad.rows], dv[..., : pad.cols]
            dh0 = pad.cut_state(dh0)
        return dq, dk, dv, dg, dbeta, None, dh0, None


def chunk_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Gated DeltaNet, chunked (chunk size 64), forward and backward in Triton.

    Args:
        q, k: [B, T, H, K] (K <= 256). v: [B, T, H, V]. g (log-space decay) and beta: [B, T, H].
            fp32, fp16 or bf16; the state and all accumulation are fp32, and by default
            16-bit inputs are computed as fp32 copies (see kernels/_precision.py).
        scale: query scale, K ** -0.5 by default.
        initial_state: optional [B, H, K, V] fp32 state entering step 0.
        output_final_state: also return the state after the last step.

    Returns:
        (o, final_state): o [B, T, H, V] in v's dtype; final_state [B, H, K, V] fp32, or None
        when ``output_final_state`` is False. Differentiable in q, k, v, g, beta and
        initial_state; deterministic (no atomics, fixed launch configurations).

    The forward is the verified staged one unless the module setting ``FORWARD`` is
    "registers" (chunk_fwd_fast.py: register operands and tf32x3 dots, opt-in, not yet timed
    or verified on a device); the backward is the same for both.
    """
    _check_inputs(q, k, v, g, beta, initial_state)
    return apply_recurrence(
        ChunkGatedDeltaRuleFunction,
        q,
        k,
        v,
        g,
        beta,
        scale=scale,
        initial_state=initial_state,
        output_final_state=output_final_state,
    )
