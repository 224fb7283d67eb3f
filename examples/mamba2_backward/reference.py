"""KernelBench-style reference: the gradients of Mamba-2's SSD scan.

The forward is the step-by-step scan of examples/mamba2/reference.py, with an initial state
h_0 (an input) and the final state h_T as a second output. Heads come as [num_groups,
heads_per_group]: the heads of group g share that group's B and C. Per batch b, group g and
head r of it, with state h of shape [N, P]:
    h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t^T;  y_t = C_t^T h_t + D x_t
The backward contract's outputs are the gradients of <y, dy> + <h_T, dht> with respect to
x, dt, A, B, C, D and h_0, taken by torch.autograd through that loop. The upstream gradients
dy and dht are inputs, so the reference is a pure function of its inputs: the oracle runs it
in float64, where autograd of the loop is the exact chain rule up to float64 rounding.
T = 70 (two chunks, the second ragged; small for the CPU interpreter) is deliberately not a
multiple of the 64-step chunks our chunked kernel uses.
"""

import math

import torch
import torch.nn as nn

batch_size = 2
seq_len = 70
num_groups = 2
heads_per_group = 2
state_dim = 32
head_dim = 32


def scan(x, dt, A, B, C, D, initial_state):
    """Outputs y [b, T, G, R, P] and the final state [b, G, R, N, P], one step at a time."""
    state = initial_state
    # Computed in the state's dtype (a no-op when every input has one dtype, as in the
    # float64 oracle; float32 for 16-bit inputs with a float32 state).
    x, dt, A, B, C, D = (t.to(state.dtype) for t in (x, dt, A, B, C, D))
    outputs = []
    for t in range(x.shape[1]):
        decay = torch.exp(dt[:, t] * A)[..., None, None]
        written = (dt[:, t][..., None] * B[:, t][:, :, None, :])[..., :, None] * x[:, t][
            ..., None, :
        ]
        state = decay * state + written
        read = torch.einsum("bgn,bgrnp->bgrp", C[:, t], state)
        outputs.append(read + D[..., None] * x[:, t])
    return torch.stack(outputs, dim=1), state


class Model(nn.Module):
    def forward(self, x, dt, A, B, C, D, dy, initial_state, dht):
        # Detached leaves: the gradients are a function of the input values alone, and the
        # inputs themselves are never marked or written.
        leaves = [t.detach().requires_grad_() for t in (x, dt, A, B, C, D, initial_state)]
        with torch.enable_grad():
            y, final_state = scan(*leaves)
            grads = torch.autograd.grad((y, final_state), leaves, (dy, dht))
        return tuple(grads)  # dx, ddt, dA, dB, dC, dD, dh0


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
    dy = torch.randn(batch_size, seq_len, *heads, head_dim)
    initial_state = torch.randn(batch_size, *heads, state_dim, head_dim)
    dht = torch.randn(batch_size, *heads, state_dim, head_dim)
    return [x, dt, A, B, C, D, dy, initial_state, dht]


def get_init_inputs():
    return []
