"""kernelgate's chunked Triton KDA backward (src/kernelgate/kernels/kda) as a candidate for the
backward contract: the forward kernels run on detached copies of the inputs (so the caller's
tensors are neither marked nor written), then torch.autograd.grad runs the backward kernels
with the given upstream gradients. Every returned gradient is a fresh tensor."""

import torch
import torch.nn as nn

from kernelgate.kernels.kda import chunk_kda


class ModelNew(nn.Module):
    def forward(self, q, k, v, g, beta, do, initial_state, dht):
        leaves = [x.detach().requires_grad_() for x in (q, k, v, g, beta, initial_state)]
        with torch.enable_grad():
            o, final_state = chunk_kda(*leaves[:5], initial_state=leaves[5], output_final_state=True)
            grads = torch.autograd.grad((o, final_state), leaves, (do, dht))
        return tuple(grads)  # dq, dk, dv, dg, dbeta, dh0
