"""Float64 reference recurrence for DeltaNet (the oracle beside the chunked kernels).

Written out on its own rather than as the gated recurrence at g = 0: the chunked kernel does
reuse the Gated DeltaNet kernels, and an oracle that shared their code path (or the gated
oracle's) would not be an independent check of that reuse. As in the gated oracle, the loop
runs over time with batched tensor ops over batch and heads, and gradients come from
torch.autograd through it.
"""

from __future__ import annotations

import torch


def naive_recurrent_delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    scale: float | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    compute_dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The delta rule, step by step, in ``compute_dtype`` (float64 by default).

    Per batch b and head h, with state S of shape [K, V] (fla's conventions, as for the gated
    rule with g = 0)::

        S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T
        o_t = S_t^T (scale * q_t)

    Args:
        q, k: [B, T, H, K]. v: [B, T, H, V]. beta: [B, T, H].
        scale: defaults to K ** -0.5.
        initial_state: optional [B, H, K, V].
        output_final_state: return S_T as well.
        compute_dtype: dtype of every operation; the oracle uses float64.

    Returns:
        (o, final_state): o is [B, T, H, V] in ``compute_dtype``, final_state is
        [B, H, K, V] in ``compute_dtype`` or None.
    """
    batch, seq_len, heads, dim_k = q.shape
    dim_v = v.shape[-1]
    if scale is None:
        scale = dim_k**-0.5
    q, k, v, beta = (x.to(compute_dtype) for x in (q, k, v, beta))
    if initial_state is None:
        state = q.new_zeros(batch, heads, dim_k, dim_v)
    else:
        state = initial_state.to(compute_dtype)
    outputs = []
    for t in range(seq_len):
        k_t = k[:, t]  # [B, H, K]
        error = v[:, t] - torch.einsum("bhkv,bhk->bhv", state, k_t)  # v_t - S^T k_t
        state = state + beta[:, t][..., None, None] * k_t[..., :, None] * error[..., None, :]
        outputs.append(torch.einsum("bhkv,bhk->bhv", state, q[:, t] * scale))
    o = torch.stack(outputs, dim=1)
    return o, (state if output_final_state else None)
