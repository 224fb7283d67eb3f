"""KernelBench-style reference: the gradients of Kimi Delta Attention (KDA), bf16 inputs.

The same math as reference.py (kept self-contained: the judge loads each reference file on its
own); get_inputs gives bfloat16 q, k, v, beta and do, float32 g, initial state and dht, as a
bf16 model calls the kernels (the per-channel gate stays fp32, as a model keeps its log
decays). The honest native evaluation computes in the float32 state's dtype; the oracle, as
always, in float64.

The forward is the step-by-step recurrence of examples/kda/reference.py (the gated delta rule
with a per-key-channel log decay g_t of shape [K]), with an initial state S_0 (an input) and
the final state S_T as a second output. Per batch b and head h:
    S' = diag(exp(g_t)) S;  u_t = beta_t (v_t - S'^T k_t);  S_t = S' + k_t u_t^T;
    o_t = S_t^T (q_t / sqrt(K))
The backward contract's outputs are the gradients of <o, do> + <S_T, dht> with respect to
q, k, v, g, beta and S_0, taken by torch.autograd through that loop. The upstream gradients do
and dht are inputs, so the reference is a pure function of its inputs: the oracle runs it in
float64, where autograd of the loop is the exact chain rule up to float64 rounding.
T = 40 (three chunks, the third ragged; small for the CPU interpreter) is deliberately not a
multiple of the 16-step chunks our chunked kernel uses.
"""

import torch
import torch.nn as nn

batch_size = 2
seq_len = 40
num_heads = 2
head_dim_k = 32
head_dim_v = 32


def recurrence(q, k, v, g, beta, initial_state):
    """Outputs o [B, T, H, V] and the final state [B, H, K, V], one step at a time."""
    steps, dim_k = q.shape[1], q.shape[-1]
    state = initial_state
    # Computed in the state's dtype (a no-op when every input has one dtype, as in the
    # float64 oracle; float32 for 16-bit inputs with a float32 state).
    q, k, v, g, beta = (x.to(state.dtype) for x in (q, k, v, g, beta))
    outputs = []
    for t in range(steps):
        decayed = state * g[:, t].exp()[..., None]  # row c of the state scaled by exp(g_t[c])
        predicted = torch.einsum("bhk,bhkv->bhv", k[:, t], decayed)
        update = beta[:, t][..., None] * (v[:, t] - predicted)
        state = decayed + k[:, t][..., :, None] * update[..., None, :]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * dim_k**-0.5, state))
    return torch.stack(outputs, dim=1), state


class Model(nn.Module):
    def forward(self, q, k, v, g, beta, do, initial_state, dht):
        # Detached leaves: the gradients are a function of the input values alone, and the
        # inputs themselves are never marked or written.
        leaves = [x.detach().requires_grad_() for x in (q, k, v, g, beta, initial_state)]
        with torch.enable_grad():
            o, final_state = recurrence(*leaves)
            grads = torch.autograd.grad((o, final_state), leaves, (do, dht))
        return tuple(grads)  # dq, dk, dv, dg, dbeta, dh0


def get_inputs():
    shape = (batch_size, seq_len, num_heads)
    q = torch.randn(*shape, head_dim_k)
    k = torch.nn.functional.normalize(torch.randn(*shape, head_dim_k), dim=-1)
    v = torch.randn(*shape, head_dim_v)
    g = torch.nn.functional.logsigmoid(torch.randn(*shape, head_dim_k))
    beta = torch.sigmoid(torch.randn(shape))
    do = torch.randn(*shape, head_dim_v)
    initial_state = torch.randn(batch_size, num_heads, head_dim_k, head_dim_v)
    dht = torch.randn(batch_size, num_heads, head_dim_k, head_dim_v)
    bf16 = torch.bfloat16
    return [q.to(bf16), k.to(bf16), v.to(bf16), g, beta.to(bf16), do.to(bf16), initial_state, dht]


def get_init_inputs():
    return []
