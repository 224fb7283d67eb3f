"""Autograd wrapper and launch logic for the chunked Mamba-2 SSD kernels.

Besides the four Triton kernels (chunk_fwd.py, chunk_bwd.py), a few elementwise and reduction
steps run as torch ops here, each of them O(b T H) or a fixed-order sum: the log decays
``a = dt A`` and their chunk-wise cumulative sums (float64), the chain rule from ``a`` back to
``dt`` and ``A``, the sum of the per-head dB and dC over the heads of a group, and dD. torch's
reductions on a given shape are deterministic, so the whole layer is bitwise reproducible.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
import triton

from kernelgate.kernels._common import (
    aligned,
    check_initial_state,
    check_length,
    fp32_state,
    has_initial_state,
    initial_state_grad,
    kernel_inputs,
    remember_initial_state,
    round_up,
    state_buffer,
)
from kernelgate.kernels._padding import StatePadding, zero_pad
from kernelgate.kernels._precision import dot_precision as _dot_precision
from kernelgate.kernels.mamba2.chunk_bwd import _ssd_chunk_bwd_kernel, _ssd_state_bwd_kernel
from kernelgate.kernels.mamba2.chunk_fwd import _ssd_output_fwd_kernel, _ssd_state_fwd_kernel

CHUNK_SIZE = 64
# Every kernel follows the Gated DeltaNet forward's register recipe (gdn/chunk_fwd.py): dots
# read both operands from memory and reduce over REDUCE_BLOCK, 8 warps. Fixed configurations,
# no autotuning (its pick can change between runs, and it cannot run under the interpreter).
REDUCE_BLOCK = 32
SCAN_TILE = 32  # the [N, P] state tile of one forward scan program
OUTPUT_BLOCK_P = 32
NUM_WARPS = {"state_fwd": 8, "output_fwd": 8, "state_bwd": 8, "chunk_bwd": 8}


def _check_inputs(x, dt, A, B, C, D, initial_state) -> None:
    if x.dim() != 4:
        raise ValueError(f"expected x [b, T, H, P], got {tuple(x.shape)}")
    check_length(x)
    batch, seq_len, heads, dim_p = x.shape
    if tuple(dt.shape) != (batch, seq_len, heads):
        raise ValueError(
            f"expected dt [b, T, H] = {(batch, seq_len, heads)}, got {tuple(dt.shape)}"
        )
    if tuple(A.shape) != (heads,):
        raise ValueError(f"expected A [H] = {(heads,)}, got {tuple(A.shape)}")
    if B.dim() != 4 or tuple(B.shape[:2]) != (batch, seq_len) or C.shape != B.shape:
        raise ValueError(
            f"expected B and C [b, T, G, N] with b, T = {batch}, {seq_len}, "
            f"got {tuple(B.shape)}, {tuple(C.shape)}"
        )
    groups, dim_n = B.shape[2], B.shape[3]
    if groups < 1 or heads % groups:
        raise ValueError(f"H = {heads} heads must be a multiple of G = {groups} groups")
    if D is not None and tuple(D.shape) != (heads,):
        raise ValueError(f"expected D [H] = {(heads,)}, got {tuple(D.shape)}")
    check_initial_state(initial_state, (batch, heads, dim_n, dim_p))


def _chunk_cumsum(a: torch.Tensor) -> torch.Tensor:
    """Cumulative sums of the float64 log decays ``a`` [b, T, H] inside each chunk of
    CHUNK_SIZE steps, same shape (the layout gdn's _load_gate_cumsum reads)."""
    batch, seq_len, heads = a.shape
    num_chunks = triton.cdiv(seq_len, CHUNK_SIZE)
    padded = F.pad(a, (0, 0, 0, num_chunks * CHUNK_SIZE - seq_len))
    g_cum = padded.view(batch, num_chunks, CHUNK_SIZE, heads).cumsum(dim=2)
    return g_cum.view(batch, num_chunks * CHUNK_SIZE, heads)[:, :seq_len].contiguous()


def chunk_ssd_fwd(x, dt, A, B, C, D, initial_state, output_final_state):
    """Launch the two forward kernels; returns y, the final state and what backward needs."""
    batch, seq_len, heads, dim_p = x.shape
    groups, dim_n = B.shape[2], B.shape[3]
    num_chunks = triton.cdiv(seq_len, CHUNK_SIZE)
    prec = _dot_precision(x.dtype)
    f32 = dict(device=x.device, dtype=torch.float32)
    # fp64 log decays and their chunk-wise sums: decay factors are exp(G_i - G_j), and the
    # difference of two large fp32 sums would lose the small ones (see gdn/chunk_fwd.py).
    g_cum = _chunk_cumsum(dt.double() * A.double())

    states = torch.empty(batch, num_chunks, heads, dim_n, dim_p, **f32)
    final_state = state_buffer(output_final_state, (batch, heads, dim_n, dim_p), x.device)
    h0 = fp32_state(initial_state)
    grid = (triton.cdiv(dim_p, SCAN_TILE), triton.cdiv(dim_n, SCAN_TILE), batch * heads)
    scaled_x = torch.empty(grid[0] * grid[1] * grid[2], CHUNK_SIZE, SCAN_TILE, **f32)
    _ssd_state_fwd_kernel[grid](
        x,
        dt,
        B,
        g_cum,
        h0 if h0 is not None else states,
        states,
        final_state if final_state is not None else states,
        scaled_x,
        seq_len,
        num_chunks,
        H=heads,
        G=groups,
        N=dim_n,
        P=dim_p,
        C=CHUNK_SIZE,
        RC=REDUCE_BLOCK,
        BN=SCAN_TILE,
        BP=SCAN_TILE,
        HAS_H0=h0 is not None,
        STORE_HT=final_state is not None,
        PREC=prec,
        num_warps=NUM_WARPS["state_fwd"],
    )
    del scaled_x
    y = torch.empty_like(x)
    scores = torch.empty(batch, seq_len, heads, CHUNK_SIZE, **f32)
    _ssd_output_fwd_kernel[(num_chunks, batch * heads)](
        x,
        dt,
        B,
        C,
        D if D is not None else dt,
        g_cum,
        states,
        y,
        scores,
        seq_len,
        num_chunks,
        round_up(dim_n, REDUCE_BLOCK),
        round_up(dim_p, OUTPUT_BLOCK_P),
        H=heads,
        G=groups,
        N=dim_n,
        P=dim_p,
        C=CHUNK_SIZE,
        RC=REDUCE_BLOCK,
        RN=REDUCE_BLOCK,
        BP=OUTPUT_BLOCK_P,
        HAS_D=D is not None,
        PREC=prec,
        num_warps=NUM_WARPS["output_fwd"],
    )
    return y, final_state, (g_cum, states)


def _gate_pair_sums(prefix: torch.Tensor) -> torch.Tensor:
    """The gate terms of the pairs j < t <= i of each chunk, summed, in float64: [b, T, H].

    ``prefix[b, row, h, t]`` holds sum_{j <= t} e_ij for the row's in-chunk step i (the
    chunk backward kernel's inclusive prefix sums); the pairs of step t are column t - 1 of
    the rows i >= t. Read shifted rather than as column t minus e_it, which would cancel the
    chunk's largest terms against themselves (chunk_bwd.py); summed here because the kernel
    spilled doing it."""
    batch, seq_len, heads, chunk = prefix.shape
    num_chunks = triton.cdiv(seq_len, chunk)
    rows = F.pad(prefix, (0, 0, 0, 0, 0, num_chunks * chunk - seq_len)).double()
    rows = rows.view(batch, num_chunks, chunk, heads, chunk)  # [b, n, i, h, t]
    before = F.pad(rows[..., :-1], (1, 0))  # column t holds sum_{j < t} e_ij
    steps = torch.arange(chunk, device=prefix.device)
    from_t = (steps[:, None] >= steps[None, :])[:, None, :]  # [i, 1, t]: i >= t
    pairs = (before * from_t).sum(dim=2)  # [b, n, h, t]
    return pairs.transpose(2, 3).reshape(batch, num_chunks * chunk, heads)[:, :seq_len]


def _chunk_dy_x(dy: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """dY X^T within each chunk, [b, T, H, CHUNK_SIZE] (row t, column j: <dy_t, x_j> for the
    steps of t's chunk), summed over P in float64 and rounded to fp32 once.

    Why float64 and outside the kernel: on x rows with +-2^24 beside values below 1 (the
    backward contract's ORD-01 "cancel-ends" pattern) an fp32 sum over P cancels the ends to a
    multiple of 2 and drops the rest, which is all that is left, and dA kept almost nothing of
    its true value (1.03x the contract's bound). fp32 products are exact in float64. In the
    kernel a float64 dot spilled on sm_90 (40-60 bytes under Triton 3.9 as [C, RC] column
    blocks, more as one [C, C] tile); here it is one batched GEMM."""
    batch, seq_len, heads, dim_p = x.shape
    num_chunks = triton.cdiv(seq_len, CHUNK_SIZE)
    pad = (0, 0, 0, 0, 0, num_chunks * CHUNK_SIZE - seq_len)
    shape = (batch, num_chunks, CHUNK_SIZE, heads, dim_p)
    dy64 = F.pad(dy.double(), pad).view(shape)
    x64 = F.pad(x.double(), pad).view(shape)
    prod = torch.einsum("bcihp,bcjhp->bcihj", dy64, x64)
    prod = prod.reshape(batch, num_chunks * CHUNK_SIZE, heads, CHUNK_SIZE)
    return prod[:, :seq_len].float().contiguous()


def chunk_ssd_bwd(x, dt, A, B, C, D, has_initial_state, saved, dy, dht):
    """Launch the two backward kernels and finish in torch; returns dx, ddt, dA, dB, dC, dD,
    dh0 (dD and dh0 None where D or the initial state were not given)."""
    g_cum, states = saved
    batch, seq_len, heads, dim_p = x.shape
    groups, dim_n = B.shape[2], B.shape[3]
    num_chunks = triton.cdiv(seq_len, CHUNK_SIZE)
    prec = _dot_precision(x.dtype)
    f32 = dict(device=x.device, dtype=torch.float32)

    d_states = torch.empty(batch, num_chunks, heads, dim_n, dim_p, **f32)
    dh0 = state_buffer(has_initial_state, (batch, heads, dim_n, dim_p), x.device)
    dht = fp32_state(dht)
    grid = (triton.cdiv(dim_p, SCAN_TILE), triton.cdiv(dim_n, SCAN_TILE), batch * heads)
    scaled_dy = torch.empty(grid[0] * grid[1] * grid[2], CHUNK_SIZE, SCAN_TILE, **f32)
    _ssd_state_bwd_kernel[grid](
        C,
        g_cum,
        dy,
        dht if dht is not None else d_states,
        d_states,
        dh0 if dh0 is not None else d_states,
        scaled_dy,
        seq_len,
        num_chunks,
        H=heads,
        G=groups,
        N=dim_n,
        P=dim_p,
        C=CHUNK_SIZE,
        RC=REDUCE_BLOCK,
        BN=SCAN_TILE,
        BP=SCAN_TILE,
        HAS_DHT=dht is not None,
        STORE_DH0=dh0 is not None,
        PREC=prec,
        num_warps=NUM_WARPS["state_bwd"],
    )
    del scaled_dy

    dx = torch.empty_like(x)
    ddt_direct = torch.empty(batch, seq_len, heads, **f32)
    d_a = torch.empty(batch, seq_len, heads, **f32)
    db_head = torch.empty(batch, seq_len, heads, dim_n, **f32)
    dc_head = torch.empty(batch, seq_len, heads, dim_n, **f32)
    scores = torch.empty(batch, seq_len, heads, CHUNK_SIZE, **f32)
    d_scores = torch.empty_like(scores)
    gate_prefix = torch.empty_like(scores)
    dy_x = _chunk_dy_x(dy, x)
    _ssd_chunk_bwd_kernel[(num_chunks, batch * heads)](
        x,
        dt,
        B,
        C,
        D if D is not None else dt,
        g_cum,
        states,
        d_states,
        dy,
        dy_x,
        dx,
        ddt_direct,
        d_a,
        db_head,
        dc_head,
        scores,
        d_scores,
        gate_prefix,
        seq_len,
        num_chunks,
        round_up(dim_n, REDUCE_BLOCK),
        round_up(dim_p, REDUCE_BLOCK),
        H=heads,
        G=groups,
        N=dim_n,
        P=dim_p,
        C=CHUNK_SIZE,
        RC=REDUCE_BLOCK,
        RN=REDUCE_BLOCK,
        BP=REDUCE_BLOCK,
        HAS_D=D is not None,
        PREC=_dot_precision(x.dtype, "mamba2._ssd_chunk_bwd_kernel"),
        num_warps=NUM_WARPS["chunk_bwd"],
    )
    del scores, d_scores, dy_x
    # a = dt A: d dt = direct part + A d a; dA = sum over b, T of dt d a (float64 sums).
    d_a64 = d_a.double() + _gate_pair_sums(gate_prefix)
    ddt = (ddt_direct.double() + A.double() * d_a64).to(dt.dtype)
    dA = (dt.double() * d_a64).sum(dim=(0, 1)).to(A.dtype)
    # The heads of a group share B and C rows: their gradients add up.
    per_group = (batch, seq_len, groups, heads // groups, dim_n)
    dB = db_head.view(per_group).sum(dim=3).to(B.dtype)
    dC = dc_head.view(per_group).sum(dim=3).to(C.dtype)
    dD = None
    if D is not None:
        dD = (x.double() * dy.double()).sum(dim=(0, 1, 3)).to(D.dtype)
    return dx, ddt, dA, dB, dC, dD, dh0


class ChunkSSDFunction(torch.autograd.Function):
    """Forward saves the fp64 chunk-wise cumulative log decays and the fp32 chunk states, so
    the backward recomputes nothing sequential except its own reverse scan.

    N and P of an odd width are zero-padded to aligned widths around the kernels (a copy of
    x, B, C and the states only then; see kernelgate.kernels._padding): the padded state rows
    and columns stay exactly zero (their B, C rows and x columns are zero), contribute nothing
    to y or to any gradient, and are cut off the results."""

    @staticmethod
    def forward(ctx, x, dt, A, B, C, D, initial_state, output_final_state):
        pad = StatePadding.of(B.shape[-1], x.shape[-1], (B.dtype, C.dtype), (x.dtype,))
        x = zero_pad(x, pad.cols_wide)
        B, C = zero_pad(B, pad.rows_wide), zero_pad(C, pad.rows_wide)
        initial_state = pad.pad_state(initial_state)
        y, final_state, saved = chunk_ssd_fwd(x, dt, A, B, C, D, initial_state, output_final_state)
        ctx.save_for_backward(x, dt, A, B, C, D, *saved)
        ctx.pad = pad
        remember_initial_state(ctx, initial_state)
        return pad.cut_forward(y, final_state)

    @staticmethod
    def backward(ctx, dy, dht):
        x, dt, A, B, C, D, *saved = ctx.saved_tensors
        pad = ctx.pad
        dy, dht = pad.pad_cotangents(dy, dht)
        dx, ddt, dA, dB, dC, dD, dh0 = chunk_ssd_bwd(
            x, dt, A, B, C, D, has_initial_state(ctx), saved, aligned(dy), dht
        )
        dh0 = initial_state_grad(ctx, pad.cut_state(dh0))
        dx, dB, dC = dx[..., : pad.cols], dB[..., : pad.rows], dC[..., : pad.rows]
        return dx, ddt, dA, dB, dC, dD, dh0, None


def chunk_ssd(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Mamba-2's SSD layer, chunked (chunk size 64), forward and backward in Triton.

    ``h_t = exp(dt_t A_h) h_{t-1} + dt_t B_t x_t^T``, ``y_t = C_t^T h_t + D_h x_t``, head h
    reading group ``h // (H // G)`` of B and C.

    Args:
        x: [b, T, H, P]. dt: [b, T, H], positive (softplus applied by the caller). A: [H].
            B, C: [b, T, G, N] with H % G == 0. D: optional [H]. fp32, fp16 or bf16; the
            state and all accumulation are fp32, the log decays fp64. By default 16-bit
            inputs are computed as fp32 copies (see kernels/_precision.py).
        initial_state: optional [b, H, N, P] fp32 state entering step 0.
        output_final_state: also return the state after the last step.

    Returns:
        (y, final_state): y [b, T, H, P] in x's dtype; final_state [b, H, N, P] fp32, or
        None when ``output_final_state`` is False. Differentiable in x, dt, A, B, C, D and
        initial_state; deterministic (no atomics, fixed launch configurations).
    """
    _check_inputs(x, dt, A, B, C, D, initial_state)
    out_dtype = x.dtype
    x, dt, A, B, C, D = kernel_inputs(x, dt, A, B, C, D)
    y, final_state = ChunkSSDFunction.apply(x, dt, A, B, C, D, initial_state, output_final_state)
    return y.to(out_dtype), final_state
