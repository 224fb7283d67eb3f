"""Float64 reference recurrence for Gated DeltaNet (the oracle beside the Triton kernels).

The recurrence is evaluated one time step at a time, exactly as it is defined, with batched
tensor ops over the batch and head dimensions only. That keeps it obviously correct (no chunking,
no WY algebra) while staying usable on a GPU at T = 4096, where a per-(b, h) Python loop would be
far too slow. Gradients come from torch.autograd through this loop.
"""

from __future__ import annotations

import torch


def naive_recurrent_gated_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    compute_dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Gated delta rule, step by step, in ``compute_dtype`` (float64 by default).

    Per batch b and head h, with state S of shape [K, V]::

        S' = exp(g_t) * S_{t-1}
        u_t = beta_t * (v_t - S'^T k_t)
        S_t = S' + k_t u_t^T
        o_t = S_t^T (scale * q_t)

    Args:
        q, k: [B, T, H, K]. v: [B, T, H, V]. g (log-space decay), beta: [B, T, H].
        scale: defaults to K ** -0.5.
        initial_state: optional [B, H, K, V].
        output_final_state: return S_T as well.
        compute_dtype: dtype of every operation; the oracle uses float64.

    Returns:
        (o, final_state): o is [B, T, H, V] in ``compute_dtype`` (an oracle keeps its
        precision; callers round it themselves), final_state is [B, H, K, V] in
        ``compute_dtype`` or None.
    """
    batch, seq_len, heads, dim_k = q.shape
    dim_v = v.shape[-1]
    if scale is None:
        scale = dim_k**-0.5
    q, k, v, g, beta = (x.to(compute_dtype) for x in (q, k, v, g, beta))
    if initial_state is None:
        state = q.new_zeros(batch, heads, dim_k, dim_v)
    else:
        state = initial_state.to(compute_dtype)
    outputs = []
    for t in range(seq_len):
        q_t, k_t, v_t = q[:, t], k[:, t], v[:, t]  # [B, H, K] / [B, H, V]
        decayed = state * g[:, t].exp()[..., None, None]
        predicted = torch.einsum("bhk,bhkv->bhv", k_t, decayed)
        u_t = beta[:, t][..., None] * (v_t - predicted)
        state = decayed + k_t[..., :, None] * u_t[..., None, :]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q_t * scale, state))
    o = torch.stack(outputs, dim=1)
    return o, (state if output_final_state else None)
