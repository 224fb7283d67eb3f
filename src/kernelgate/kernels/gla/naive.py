"""Float64 reference recurrence for gated linear attention (GLA), the oracle beside the kernels.

The recurrence is evaluated one time step at a time, exactly as it is defined, with batched
tensor ops over the batch and head dimensions only: obviously correct (no chunking, no
factorised decays) and still usable on a GPU at T = 4096. Gradients come from torch.autograd
through this loop.
"""

from __future__ import annotations

import torch


def naive_recurrent_gla(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    g: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    compute_dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """GLA, step by step, in ``compute_dtype`` (float64 by default).

    Per batch b and head h, with state S of shape [K, V]::

        S_t = diag(exp(g_t)) S_{t-1} + k_t v_t^T
        o_t = S_t^T (scale * q_t)

    Args:
        q, k: [B, T, H, K]. v: [B, T, H, V]. g: [B, T, H, K], per-key-channel log decay.
        scale: defaults to K ** -0.5.
        initial_state: optional [B, H, K, V].
        output_final_state: return S_T as well.
        compute_dtype: dtype of every operation; the oracle uses float64.

    Returns:
        (o, final_state): o [B, T, H, V] and final_state [B, H, K, V] (or None), both in
        ``compute_dtype`` (an oracle keeps its precision; callers round it themselves).
    """
    batch, seq_len, heads, dim_k = q.shape
    dim_v = v.shape[-1]
    if scale is None:
        scale = dim_k**-0.5
    q, k, v, g = (x.to(compute_dtype) for x in (q, k, v, g))
    if initial_state is None:
        state = q.new_zeros(batch, heads, dim_k, dim_v)
    else:
        state = initial_state.to(compute_dtype)
    outputs = []
    for t in range(seq_len):
        state = state * g[:, t].exp()[..., None] + k[:, t][..., :, None] * v[:, t][..., None, :]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, state))
    o = torch.stack(outputs, dim=1)
    return o, (state if output_final_state else None)
