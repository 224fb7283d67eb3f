"""A defective backward candidate: it forgets the final state's upstream gradient.

The same kernels as candidate.py, but autograd is asked only for the gradients of <y, dy>:
dht (the gradient reaching h_T) is dropped, a plausible slip when a layer's final state is
usually discarded. Every gradient then misses dht's contribution, most visibly dh0 and the
last steps' dx, ddt, dB, and dA. CMP-01 rejects it
(tests/kernels/test_family_backward_examples.py).
"""

import torch
import torch.nn as nn

from kernelgate.kernels.mamba2 import chunk_ssd


class ModelNew(nn.Module):
    def forward(self, x, dt, A, B, C, D, dy, initial_state, dht):
        leaves = [t.detach().requires_grad_() for t in (x, dt, A, B, C, D, initial_state)]
        x_, dt_, A_, B_, C_, D_, h0_ = leaves
        batch, steps, groups, per_group, dim_p = x.shape
        heads = groups * per_group
        with torch.enable_grad():
            y, _ = chunk_ssd(
                x_.reshape(batch, steps, heads, dim_p),
                dt_.reshape(batch, steps, heads),
                A_.reshape(heads),
                B_,
                C_,
                D_.reshape(heads),
                initial_state=h0_.reshape(batch, heads, *h0_.shape[-2:]),
            )
            grads = torch.autograd.grad(y.view(x.shape), leaves, dy)
        return tuple(grads)
