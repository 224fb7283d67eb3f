"""KernelBench-style reference: the gradients of the DeltaNet recurrence, bf16 inputs.

The same math as reference.py (kept self-contained: the judge loads each reference file on its
own); get_inputs gives bfloat16 q, k, v, beta and do, float32 initial state and dht, as a
bf16 model calls the kernels. The honest native evaluation computes in the float32 state's
dtype; the oracle, as always, in float64.

The forward is the step-by-step recurrence of examples/delta_rule/reference.py, with an
initial state S_0 (an input) and the final state S_T as a second output. Per batch b and
head h:
    S_t = S_{t-1} + beta_t k_t (v_t - S_{t-1}^T k_t)^T;  o_t = S_t^T (q_t / sqrt(K))
The backward contract's outputs are the gradients of <o, do> + <S_T, dht> with respect to
q, k, v, beta and S_0, taken by torch.autograd through that loop. The upstream gradients do
and dht are inputs, so the reference is a pure function of its inputs: the oracle runs it in
float64, where autograd of the loop is the exact chain rule up to float64 rounding.
T = 70 (two chunks, the second ragged; small for the CPU interpreter) is deliberately not a
multiple of the 64-step chunks a chunked kernel uses.
"""

import torch
import torch.nn as nn

batch_size = 2
seq_len = 70
num_heads = 2
head_dim_k = 32
head_dim_v = 32


def recurrence(q, k, v, beta, initial_state):
    """Outputs o [B, T, H, V] and the final state [B, H, K, V], one step at a time."""
    steps, dim_k = q.shape[1], q.shape[-1]
    state = initial_state
    # Computed in the state's dtype (a no-op when every input has one dtype, as in the
    # float64 oracle; float32 for 16-bit inputs with a float32 state).
    q, k, v, beta = (x.to(state.dtype) for x in (q, k, v, beta))
    outputs = []
    for t in range(steps):
        recalled = torch.einsum("bhk,bhkv->bhv", k[:, t], state)
        error = v[:, t] - recalled
        state = state + beta[:, t][..., None, None] * k[:, t][..., :, None] * error[..., None, :]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * dim_k**-0.5, state))
    return torch.stack(outputs, dim=1), state


class Model(nn.Module):
    def forward(self, q, k, v, beta, do, initial_state, dht):
        # Detached leaves: the gradients are a function of the input values alone, and the
        # inputs themselves are never marked or written.
        leaves = [x.detach().requires_grad_() for x in (q, k, v, beta, initial_state)]
        with torch.enable_grad():
            o, final_state = recurrence(*leaves)
            grads = torch.autograd.grad((o, final_state), leaves, (do, dht))
        return tuple(grads)  # dq, dk, dv, dbeta, dh0


def get_inputs():
    shape = (batch_size, seq_len, num_heads)
    q = torch.randn(*shape, head_dim_k)
    k = torch.nn.functional.normalize(torch.randn(*shape, head_dim_k), dim=-1)
    v = torch.randn(*shape, head_dim_v)
    beta = torch.sigmoid(torch.randn(shape))
    do = torch.randn(*shape, head_dim_v)
    initial_state = torch.randn(batch_size, num_heads, head_dim_k, head_dim_v)
    dht = torch.randn(batch_size, num_heads, head_dim_k, head_dim_v)
    bf16 = torch.bfloat16
    return [q.to(bf16), k.to(bf16), v.to(bf16), beta.to(bf16), do.to(bf16), initial_state, dht]


def get_init_inputs():
    return []
