"""kernelgate's chunked Triton GLA backward (src/kernelgate/kernels/gla) as a candidate for
the backward contract: the forward kernels run on detached copies of the inputs (so the
caller's tensors are neither marked nor written), then torch.autograd.grad runs the backward
kernels with the given upstream gradients. Every returned gradient is a fresh tensor."""

import torch
import torch.nn as nn

from kernelgate.kernels.gla import chunk_gla


class ModelNew(nn.Module):
    def forward(self, q, k, v, g, do, initial_state, dht):
        leaves = [x.detach().requires_grad_() for x in (q, k, v, g, initial_state)]
        with torch.enable_grad():
            o, final_state = chunk_gla(
                *leaves[:4], initial_state=leaves[4], output_final_state=True
            )
            grads = torch.autograd.grad((o, final_state), leaves, (do, dht))
        return tuple(grads)  # dq, dk, dv, dg, dh0
