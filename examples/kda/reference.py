"""KernelBench-style reference: Kimi Delta Attention (KDA), one time step at a time.

The gated delta rule with a per-key-channel log decay g_t of shape [K]. Per batch b and head
h, with state S of shape [K, V] starting at zero:
    S' = diag(exp(g_t)) S;  u_t = beta_t (v_t - S'^T k_t);  S_t = S' + k_t u_t^T
    (= (I - beta_t k_t k_t^T) S' + beta_t k_t v_t^T);  o_t = S_t^T (q_t / sqrt(K))
T = 130 is deliberately not a multiple of the 16-step chunks our chunked kernel uses.
"""

import torch
import torch.nn as nn

batch_size = 2
seq_len = 130
num_heads = 2
head_dim_k = 32
head_dim_v = 32


class Model(nn.Module):
    def forward(self, q, k, v, g, beta):
        batch, steps, heads, dim_k = q.shape
        state = q.new_zeros(batch, heads, dim_k, v.shape[-1])
        outputs = []
        for t in range(steps):
            decayed = state * g[:, t].exp()[..., None]
            predicted = torch.einsum("bhk,bhkv->bhv", k[:, t], decayed)
            update = beta[:, t][..., None] * (v[:, t] - predicted)
            state = decayed + k[:, t][..., :, None] * update[..., None, :]
            outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * dim_k**-0.5, state))
        return torch.stack(outputs, dim=1)


def get_inputs():
    shape = (batch_size, seq_len, num_heads)
    q = torch.randn(*shape, head_dim_k)
    k = torch.nn.functional.normalize(torch.randn(*shape, head_dim_k), dim=-1)
    v = torch.randn(*shape, head_dim_v)
    g = torch.nn.functional.logsigmoid(torch.randn(*shape, head_dim_k))
    beta = torch.sigmoid(torch.randn(shape))
    return [q, k, v, g, beta]


def get_init_inputs():
    return []
