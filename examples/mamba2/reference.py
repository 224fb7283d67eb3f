"""KernelBench-style reference: Mamba-2's SSD scan, one time step at a time.

Heads come as [num_groups, heads_per_group]: the heads of group g share that group's B and C.
Per batch b, group g and head r of it, with state h of shape [N, P] starting at zero:
    h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t^T;  y_t = C_t^T h_t + D x_t
T = 130 is deliberately not a multiple of the 64-step chunks a chunked kernel uses.
"""

import math

import torch
import torch.nn as nn

batch_size = 2
seq_len = 130
num_groups = 2
heads_per_group = 2
state_dim = 32
head_dim = 32


class Model(nn.Module):
    def forward(self, x, dt, A, B, C, D):
        batch, steps, groups, per_group, dim_p = x.shape
        state = x.new_zeros(batch, groups, per_group, B.shape[-1], dim_p)
        outputs = []
        for t in range(steps):
            decay = torch.exp(dt[:, t] * A)[..., None, None]
            written = (dt[:, t][..., None] * B[:, t][:, :, None, :])[..., :, None] * x[:, t][
                ..., None, :
            ]
            state = decay * state + written
            read = torch.einsum("bgn,bgrnp->bgrp", C[:, t], state)
            outputs.append(read + D[..., None] * x[:, t])
        return torch.stack(outputs, dim=1)


def get_inputs():
    heads = (num_groups, heads_per_group)
    x = torch.randn(batch_size, seq_len, *heads, head_dim)
    # Mamba-2's initial ranges: dt log-uniform in [0.001, 0.1], A = -uniform(1, 16).
    log_dt = torch.empty(batch_size, seq_len, *heads).uniform_(math.log(1e-3), math.log(0.1))
    dt = log_dt.exp()
    A = -torch.empty(heads).uniform_(1.0, 16.0)
    B = torch.randn(batch_size, seq_len, num_groups, state_dim) * state_dim**-0.5
    C = torch.randn(batch_size, seq_len, num_groups, state_dim) * state_dim**-0.5
    D = torch.randn(heads)
    return [x, dt, A, B, C, D]


def get_init_inputs():
    return []
