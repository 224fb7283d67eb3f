"""A defective backward candidate: it forgets the final state's upstream gradient.

The same kernels as candidate.py, but autograd is asked only for the gradients of <o, do>:
dht (the gradient reaching S_T) is dropped, a plausible slip when a layer's final state is
usually discarded. Every gradient then misses dht's contribution, most visibly dh0 and the
last steps' dk, dv and dg. CMP-01 rejects it (tests/kernels/test_family_backward_examples.py).
"""

import torch
import torch.nn as nn

from kernelgate.kernels.gla import chunk_gla


class ModelNew(nn.Module):
    def forward(self, q, k, v, g, do, initial_state, dht):
        leaves = [x.detach().requires_grad_() for x in (q, k, v, g, initial_state)]
        with torch.enable_grad():
            o, _ = chunk_gla(*leaves[:4], initial_state=leaves[4])
            grads = torch.autograd.grad(o, leaves, do)
        return tuple(grads)
