"""Chunked DeltaNet: the Gated DeltaNet kernels (kernelgate.kernels.gdn) run at g = 0.

Why reuse rather than a second set of kernels: at g = 0 every gate quantity of the gated
kernels is exactly neutral, not approximately. The fp64 cumulative gate of a chunk is a sum
of zeros (exactly 0), so every decay factor ``exp(fp32(G_i - G_j))``, ``gamma_i = exp(G_i)``
and ``exp(G_L)`` is exactly 1.0, and each multiplication by it returns its operand unchanged.
The chunked computation is therefore, operation for operation and bit for bit, the un-gated
WY algorithm (A = strict_lower(diag(beta) K K^T), W = Tinv diag(beta) K, U = Tinv diag(beta) V,
H_next = H + K^T (U - W H)); nothing is approximated by the reuse.

What it costs over dedicated un-gated kernels: one fp32 zeros tensor [B, T, H] (4 bytes per
token and head, beside the 2 x (2K + V) bytes of bf16 q, k, v), the fp64 cumsum of it and the
multiplications by 1.0 in the kernels, and, in the backward, the gate gradient that the gated
kernels compute and this wrapper drops. The H200 measurement of the gated kernels
(docs/kernels/gdn.md, benchmarks/results/gdn-h200.json) has the g = 0 and the gated forward
times equal to within 0.3 % at every T from 1024 to 16384 (1.613 against 1.609 ms at
T = 4096; backward 1.974 against 1.986 ms): the gate work is not where the time goes.
The same launch configurations, register budgets and determinism apply (see gdn/chunk.py).
"""

from __future__ import annotations

import torch

from kernelgate.kernels._common import (
    aligned,
    apply_recurrence,
    has_initial_state,
    initial_state_grad,
    remember_initial_state,
)
from kernelgate.kernels._padding import StatePadding, zero_pad
from kernelgate.kernels.gdn.chunk import (
    _check_inputs,
    chunk_gated_delta_rule_bwd,
    chunk_gated_delta_rule_fwd,
)


def _check_delta_rule_inputs(q, k, v, beta, initial_state) -> None:
    """Shape errors in the delta rule's own terms (there is no g argument to blame)."""
    if q.dim() != 4:
        raise ValueError(f"expected q [B,T,H,K], got {tuple(q.shape)}")
    if beta.shape != q.shape[:3]:
        raise ValueError(f"expected beta [B,T,H] = {tuple(q.shape[:3])}, got {tuple(beta.shape)}")
    _check_inputs(q, k, v, beta, beta, initial_state)


class ChunkDeltaRuleFunction(torch.autograd.Function):
    """The gated forward and backward at g = 0 (a zeros gate that is not an input, so its
    gradient, which the gated backward computes, is dropped).

    K and V of an odd width are zero-padded to aligned widths around the kernels (a copy of
    q, k, v and the states only then; see kernelgate.kernels._padding): zero key and query
    channels change no dot product k.k or q.S, zero value channels keep their state columns
    at zero, so the padding is exact and is cut off the results. The scale is fixed from the
    caller's K before padding."""

    @staticmethod
    def forward(ctx, q, k, v, beta, scale, initial_state, output_final_state):
        pad = StatePadding.of(q.shape[-1], v.shape[-1], (q.dtype, k.dtype), (v.dtype,))
        q, k = zero_pad(q, pad.rows_wide), zero_pad(k, pad.rows_wide)
        v = zero_pad(v, pad.cols_wide)
        initial_state = pad.pad_state(initial_state)
        zero_gate = torch.zeros(q.shape[:3], device=q.device, dtype=torch.float32)
        o, final_state, saved = chunk_gated_delta_rule_fwd(
            q, k, v, zero_gate, beta, scale, initial_state, output_final_state
        )
        ctx.save_for_backward(q, k, v, zero_gate, beta, *saved)
        ctx.scale = scale
        ctx.pad = pad
        remember_initial_state(ctx, initial_state)
        return pad.cut_forward(o, final_state)

    @staticmethod
    def backward(ctx, do, dht):
        q, k, v, zero_gate, beta, *saved = ctx.saved_tensors
        pad = ctx.pad
        do, dht = pad.pad_cotangents(do, dht)
        dq, dk, dv, _, dbeta, dh0 = chunk_gated_delta_rule_bwd(
            q, k, v, zero_gate, beta, ctx.scale, has_initial_state(ctx), saved, aligned(do), dht
        )
        dh0 = initial_state_grad(ctx, pad.cut_state(dh0))
        dq, dk, dv = dq[..., : pad.rows], dk[..., : pad.rows], dv[..., : pad.cols]
        return dq, dk, dv, dbeta, None, dh0, None


def chunk_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """DeltaNet, chunked (chunk size 64), forward and backward in Triton.

    ``S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T``, ``o_t = S_t^T (scale q_t)``,
    computed by the Gated DeltaNet kernels at g = 0, which is exact (see the module
    docstring).

    Args:
        q, k: [B, T, H, K] (K <= 256). v: [B, T, H, V]. beta: [B, T, H]. fp32, fp16 or
            bf16; the state and all accumulation are fp32, and by default 16-bit inputs
            are computed as fp32 copies (see kernels/_precision.py).
        scale: query scale, K ** -0.5 by default.
        initial_state: optional [B, H, K, V] fp32 state entering step 0.
        output_final_state: also return the state after the last step.

    Returns:
        (o, final_state): o [B, T, H, V] in v's dtype; final_state [B, H, K, V] fp32, or None
        when ``output_final_state`` is False. Differentiable in q, k, v, beta and
        initial_state; deterministic (no atomics, fixed launch configurations).
    """
    _check_delta_rule_inputs(q, k, v, beta, initial_state)
    return apply_recurrence(
        ChunkDeltaRuleFunction,
        q,
        k,
        v,
        beta,
        scale=scale,
        initial_state=initial_state,
        output_final_state=output_final_state,
    )
