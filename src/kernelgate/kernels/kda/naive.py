"""Float64 reference recurrence for Kimi Delta Attention (KDA), the oracle beside the kernels.

KDA is the gated delta rule with a per-key-channel decay: where Gated DeltaNet scales the
whole state by exp(g_t) (one scalar per head and step), KDA scales row c of the state by
exp(g_t[c]). The recurrence is evaluated one time step at a time with batched tensor ops over
the batch and head dimensions only; gradients come from torch.autograd through this loop.
"""

from __future__ import annotations

import torch


def naive_recurrent_kda(
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
    """KDA, step by step, in ``compute_dtype`` (float64 by default).

    Per batch b and head h, with state S of shape [K, V]::

        S' = diag(exp(g_t)) S_{t-1}
        u_t = beta_t * (v_t - S'^T k_t)
        S_t = S' + k_t u_t^T          # = (I - beta_t k_t k_t^T) S' + beta_t k_t v_t^T
        o_t = S_t^T (scale * q_t)

    This is gdn's convention (naive_recurrent_gated_delta_rule) with the scalar exp(g_t)
    replaced by diag(exp(g_t)); with g constant over the key channels the two agree.

    Args:
        q, k: [B, T, H, K]. v: [B, T, H, V]. g: [B, T, H, K], per-key-channel log decay.
        beta: [B, T, H].
        scale: defaults to K ** -0.5.
        initial_state: optional [B, H, K, V].
        output_final_state: return S_T as well.
        compute_dtype: dtype of every operation; the oracle uses float64.

    Returns:
        (o, final_state): o [B, T, H, V] and final_state [B, H, K, V] (or None), both in
        ``compute_dtype``.
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
        k_t = k[:, t]
        decayed = state * g[:, t].exp()[..., None]
        predicted = torch.einsum("bhk,bhkv->bhv", k_t, decayed)
        u_t = beta[:, t][..., None] * (v[:, t] - predicted)
        state = decayed + k_t[..., :, None] * u_t[..., None, :]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, state))
    o = torch.stack(outputs, dim=1)
    return o, (state if output_final_state else None)
