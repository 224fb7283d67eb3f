"""Autograd wrapper and launch logic for the chunked GLA kernels."""

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
    state_buffer,
    tile_width,
)
from kernelgate.kernels._precision import dot_precision as _dot_precision
from kernelgate.kernels.gla.chunk_bwd import _dqk_bwd_kernel, _dv_bwd_kernel, _state_bwd_kernel
from kernelgate.kernels.gla.chunk_fwd import _output_fwd_kernel, _state_fwd_kernel

# 16 steps per chunk: the masked scores are built elementwise over key channels in
# [C, C, BK] tiles (exact per-channel decays, nothing that can overflow; see chunk_fwd.py),
# which stays small only for short chunks.
CHUNK_SIZE = 16
MAX_HEAD_DIM_K = 256  # the largest K the kernels are verified for
PAIR_BLOCK_K = 16  # K tile of the kernels that hold [C, C, BK] decay tiles
SCAN_BLOCK = 32  # K and V tile of the state scans, and V tile of the other kernels
NUM_WARPS = 4  # fixed launch configuration (no autotuning: its pick can differ between runs)
# _dv_bwd_kernel alone runs 8 warps: compiled offline for sm_90 with Triton 3.6 (the H200's),
# its K = 128 specialization spilled 4 bytes at 4 warps (168 registers); at 8 it takes 128
# and spills nothing with either Triton (benchmarks/gla_kda_resources.py --triton36).
DV_BWD_WARPS = 8


def check_recurrence_inputs(name, q, k, v, gates, initial_state) -> None:
    """Shape checks shared by the per-key-channel gated members (GLA, KDA): q, k [B,T,H,K],
    v [B,T,H,V], each named gate of the shape given beside it, initial_state [B,H,K,V]. The
    messages start with the function's ``name``."""
    prefix = f"{name}: "
    check_qkv(q, k, v, prefix)
    for gate_name, (gate, expected) in gates.items():
        if tuple(gate.shape) != tuple(expected):
            raise ValueError(
                f"{name}: expected {gate_name} {tuple(expected)}, got {tuple(gate.shape)}"
            )
    check_head_dim(q, MAX_HEAD_DIM_K, prefix)
    check_length(q, prefix)
    batch, _, heads, dim_k = q.shape
    check_initial_state(initial_state, (batch, heads, dim_k, v.shape[-1]), prefix)


def chunk_gla_fwd(q, k, v, g, scale, initial_state, output_final_state):
    """Launch the state scan and the output kernel; returns o, the final state and what the
    backward reads (the chunk states, as a one-tuple like the other members' intermediates)."""
    batch, seq_len, heads, dim_k = q.shape
    dim_v = v.shape[-1]
    num_chunks = triton.cdiv(seq_len, CHUNK_SIZE)
    prec = _dot_precision(q.dtype)
    scan_k, scan_v = tile_width(dim_k, SCAN_BLOCK), tile_width(dim_v, SCAN_BLOCK)
    f32 = dict(device=q.device, dtype=torch.float32)

    states = torch.empty(batch, num_chunks, heads, dim_k, dim_v, **f32)
    final_state = state_buffer(output_final_state, (batch, heads, dim_k, dim_v), q.device)
    h0 = fp32_state(initial_state)
    grid = (triton.cdiv(dim_k, scan_k), triton.cdiv(dim_v, scan_v), batch * heads)
    _state_fwd_kernel[grid](
        k,
        v,
        g,
        h0 if h0 is not None else states,
        states,
        final_state if final_state is not None else states,
        seq_len,
        num_chunks,
        H=heads,
        K=dim_k,
        V=dim_v,
        C=CHUNK_SIZE,
        BK=scan_k,
        BV=scan_v,
        HAS_H0=h0 is not None,
        STORE_HT=final_state is not None,
        PREC=prec,
        num_warps=NUM_WARPS,
    )
    o = torch.empty_like(v)
    _output_fwd_kernel[(triton.cdiv(dim_v, scan_v), num_chunks, batch * heads)](
        q,
        k,
        v,
        g,
        states,
        o,
        seq_len,
        num_chunks,
        scale,
        H=heads,
        K=dim_k,
        V=dim_v,
        C=CHUNK_SIZE,
        BK=PAIR_BLOCK_K,
        BV=scan_v,
        NK=triton.cdiv(dim_k, PAIR_BLOCK_K),
        PREC=_dot_precision(q.dtype, "gla._output_fwd_kernel"),
        num_warps=NUM_WARPS,
    )
    return o, final_state, (states,)


def chunk_gla_bwd(q, k, v, g, scale, has_initial_state, saved, do, dht):
    """Launch the reverse scan, the dv and the dq/dk/dg kernels; returns dq, dk, dv, dg, dh0."""
    (states,) = saved
    batch, seq_len, heads, dim_k = q.shape
    dim_v = v.shape[-1]
    num_chunks = triton.cdiv(seq_len, CHUNK_SIZE)
    prec = _dot_precision(q.dtype)
    scan_k, scan_v = tile_width(dim_k, SCAN_BLOCK), tile_width(dim_v, SCAN_BLOCK)

    d_states = torch.empty_like(states)
    dh0 = state_buffer(has_initial_state, (batch, heads, dim_k, dim_v), q.device)
    dht = fp32_state(dht)
    grid = (triton.cdiv(dim_k, scan_k), triton.cdiv(dim_v, scan_v), batch * heads)
    _state_bwd_kernel[grid](
        q,
        g,
        do,
        dht if dht is not None else d_states,
        d_states,
        dh0 if dh0 is not None else d_states,
        seq_len,
        num_chunks,
        scale,
        H=heads,
        K=dim_k,
        V=dim_v,
        C=CHUNK_SIZE,
        BK=scan_k,
        BV=scan_v,
        HAS_DHT=dht is not None,
        STORE_DH0=dh0 is not None,
        PREC=prec,
        num_warps=NUM_WARPS,
    )
    dv = torch.empty_like(v)
    _dv_bwd_kernel[(triton.cdiv(dim_v, scan_v), num_chunks, batch * heads)](
        q,
        k,
        g,
        d_states,
        do,
        dv,
        seq_len,
        num_chunks,
        scale,
        H=heads,
        K=dim_k,
        V=dim_v,
        C=CHUNK_SIZE,
        BK=PAIR_BLOCK_K,
        BV=scan_v,
        NK=triton.cdiv(dim_k, PAIR_BLOCK_K),
        PREC=prec,
        num_warps=DV_BWD_WARPS,
    )
    dq, dk, dg = torch.empty_like(q), torch.empty_like(k), torch.empty_like(g)
    _dqk_bwd_kernel[(triton.cdiv(dim_k, PAIR_BLOCK_K), num_chunks, batch * heads)](
        q,
        k,
        v,
        g,
        states,
        d_states,
        do,
        dq,
        dk,
        dg,
        seq_len,
        num_chunks,
        scale,
        H=heads,
        K=dim_k,
        V=dim_v,
        C=CHUNK_SIZE,
        BK=PAIR_BLOCK_K,
        BV=scan_v,
        NV=triton.cdiv(dim_v, scan_v),
        PREC=prec,
        num_warps=NUM_WARPS,
    )
    return dq, dk, dv, dg, dh0


class ChunkGLAFunction(torch.autograd.Function):
    """Forward saves the fp32 chunk states; the backward rebuilds the masked scores and the
    gates' cumulative sums (cheap, per chunk) and runs its own reverse scan."""

    @staticmethod
    def forward(ctx, q, k, v, g, scale, initial_state, output_final_state):
        inputs = (q, k, v, g)
        return recurrence_forward(
            ctx, chunk_gla_fwd, inputs, scale, initial_state, output_final_state
        )

    @staticmethod
    def backward(ctx, do, dht):
        dq, dk, dv, dg, dh0 = recurrence_backward(ctx, chunk_gla_bwd, do, dht)
        return dq, dk, dv, dg, None, dh0, None


def chunk_gla(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Gated linear attention, chunked (chunk size 16), forward and backward in Triton.

    ``S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T``, ``o_t = S_t^T (scale q_t)``.

    Args:
        q, k: [B, T, H, K] (K <= 256). v: [B, T, H, V]. g: [B, T, H, K], the per-key-channel
            log decay. fp32, fp16 or bf16; the state and all accumulation are fp32, and by
            default 16-bit inputs are computed as fp32 copies (see kernels/_precision.py).
            Safe range of g: any finite g <= 0 (every decay factor is then <= 1, however
            strong the decay); positive g only while one chunk's sum stays below 88
            (g < 5.5 per step). The contract (examples/gla/contract.toml) admits [-20, 0].
        scale: query scale, K ** -0.5 by default.
        initial_state: optional [B, H, K, V] state entering step 0 (used in fp32).
        output_final_state: also return the state after the last step.

    Returns:
        (o, final_state): o [B, T, H, V] in v's dtype; final_state [B, H, K, V] fp32, or None
        when ``output_final_state`` is False. Differentiable in q, k, v, g and initial_state;
        deterministic (no atomics, fixed launch configurations).
    """
    check_recurrence_inputs("chunk_gla", q, k, v, {"g": (g, q.shape)}, initial_state)
    return apply_recurrence(
        ChunkGLAFunction,
        q,
        k,
        v,
        g,
        scale=scale,
        initial_state=initial_state,
        output_final_state=output_final_state,
    )
