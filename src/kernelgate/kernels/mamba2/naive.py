"""Float64 reference recurrence for Mamba-2's SSD layer (the oracle beside the chunked kernels).

The scan is evaluated one time step at a time, exactly as it is defined, with batched tensor
ops over batch and heads only: obviously correct (no chunking, no masked decay matrices) and
fast enough on a GPU at benchmark lengths. Gradients come from torch.autograd through it.
"""

from __future__ import annotations

import torch


def naive_recurrent_ssd(
    x: torch.Tensor,
    dt: torch.Tensor,
    A: torch.Tensor,
    B: torch.Tensor,
    C: torch.Tensor,
    D: torch.Tensor | None = None,
    initial_state: torch.Tensor | None = None,
    output_final_state: bool = False,
    compute_dtype: torch.dtype = torch.float64,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The SSD scan, step by step, in ``compute_dtype`` (float64 by default).

    Per batch b and head h (in group ``h // (H // G)``, Mamba-2's grouping of heads), with
    state h of shape [N, P]::

        h_t = exp(dt_t A_h) h_{t-1} + dt_t B_t x_t^T
        y_t = C_t^T h_t + D_h x_t

    Args:
        x: [b, T, H, P]. dt: [b, T, H] (positive step sizes, softplus already applied).
        A: [H] (negative for a decaying state). B, C: [b, T, G, N] with H % G == 0.
        D: optional [H] skip connection.
        initial_state: optional [b, H, N, P].
        output_final_state: return h_T as well.
        compute_dtype: dtype of every operation; the oracle uses float64.

    Returns:
        (y, final_state): y is [b, T, H, P] in ``compute_dtype``, final_state is
        [b, H, N, P] in ``compute_dtype`` or None.
    """
    batch, seq_len, heads, dim_p = x.shape
    groups, dim_n = B.shape[2], B.shape[3]
    x, dt, A, B, C = (t.to(compute_dtype) for t in (x, dt, A, B, C))
    B = B.repeat_interleave(heads // groups, dim=2)  # [b, T, H, N]: head h reads group h // R
    C = C.repeat_interleave(heads // groups, dim=2)
    if initial_state is None:
        state = x.new_zeros(batch, heads, dim_n, dim_p)
    else:
        state = initial_state.to(compute_dtype)
    outputs = []
    for t in range(seq_len):
        dt_t = dt[:, t]  # [b, H]
        decay = torch.exp(dt_t * A)[..., None, None]
        write = (dt_t[..., None] * B[:, t])[..., :, None] * x[:, t][..., None, :]
        state = decay * state + write
        y_t = torch.einsum("bhn,bhnp->bhp", C[:, t], state)
        if D is not None:
            y_t = y_t + D.to(compute_dtype)[:, None] * x[:, t]
        outputs.append(y_t)
    y = torch.stack(outputs, dim=1)
    return y, (state if output_final_state else None)
