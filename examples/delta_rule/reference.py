"""KernelBench-style reference: the DeltaNet recurrence (the delta rule), one step at a time.

Per batch b and head h, with state S of shape [K, V] starting at zero:
    S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T;  o_t = S_t^T (q_t / sqrt(K))
T = 130 is deliberately not a multiple of the 64-step chunks a chunked kernel uses.
"""

import torch
import torch.nn as nn

batch_size = 2
seq_len = 130
num_heads = 2
head_dim_k = 32
head_dim_v = 32


class Model(nn.Module):
    def forward(self, q, k, v, beta):
        batch, steps, heads, dim_k = q.shape
        state = q.new_zeros(batch, heads, dim_k, v.shape[-1])
        outputs = []
        for t in range(steps):
            recalled = torch.einsum("bhk,bhkv->bhv", k[:, t], state)
            error = v[:, t] - recalled
            state = state + beta[:, t][..., None, None] * k[:, t][..., :, None] * error[..., None, :]
            outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * dim_k**-0.5, state))
        return torch.stack(outputs, dim=1)


def get_inputs():
    shape = (batch_size, seq_len, num_heads)
    q = torch.randn(*shape, head_dim_k)
    k = torch.nn.functional.normalize(torch.randn(*shape, head_dim_k), dim=-1)
    v = torch.randn(*shape, head_dim_v)
    beta = torch.sigmoid(torch.randn(shape))
    return [q, k, v, beta]


def get_init_inputs():
    return []
