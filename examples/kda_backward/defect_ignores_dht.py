"""A defective backward candidate: it forgets the final state's upstream gradient.

The same kernels as candidate.py, but autograd is asked only for the gradients of <o, do>:
dht (the gradient reaching S_T) is dropped, a plausible slip when a layer's final state is
usually discarded. Every gradient then misses dht's contribution, most visibly dh0 and the
last steps' dk, dv, dg and dbeta. CMP-01 rejects it (tests/kernels/test_family_backward_examples.py).
"""

import torch
import torch.nn as nn

from kernelgate.kernels.kda import chunk_kda


class ModelNew(nn.Module):
    def forward(self, q, k, v, g, beta, do, initial_state, dht):
        leaves = [x.detach().requires_grad_() for x in (q, k, v, g, beta, initial_state)]
        with torch.enable_grad():
            o, _ = chunk_kda(*leaves[:5], initial_state=leaves[5])
            grads = torch.autograd.grad(o, leaves, do)
        return tuple(grads)
