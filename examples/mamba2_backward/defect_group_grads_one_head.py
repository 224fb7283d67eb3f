"""A defective backward candidate: the shared B and C of a head group get the gradient of the
group's first head only, not the sum over its heads.

It runs chunk_ssd with one group per head (B and C repeated across each group's heads, which
gives the same forward) and then, instead of summing the per-head gradients of B and C back
over each group, keeps the first head's: a plausible slip when a kernel written for G = H is
extended to grouped heads. Every other gradient is candidate.py's. With one head per group the
defect is invisible; the reference's two heads per group expose it. CMP-01 rejects it
(tests/kernels/test_family_backward_examples.py).
"""

import torch
import torch.nn as nn

from kernelgate.kernels.mamba2 import chunk_ssd


class ModelNew(nn.Module):
    def forward(self, x, dt, A, B, C, D, dy, initial_state, dht):
        batch, steps, groups, per_group, dim_p = x.shape
        heads = groups * per_group
        per_head = [t.repeat_interleave(per_group, dim=2) for t in (B, C)]
        leaves = [
            t.detach().requires_grad_() for t in (x, dt, A, *per_head, D, initial_state)
        ]
        x_, dt_, A_, B_, C_, D_, h0_ = leaves
        with torch.enable_grad():
            y, final_state = chunk_ssd(
                x_.reshape(batch, steps, heads, dim_p),
                dt_.reshape(batch, steps, heads),
                A_.reshape(heads),
                B_,
                C_,
                D_.reshape(heads),
                initial_state=h0_.reshape(batch, heads, *h0_.shape[-2:]),
                output_final_state=True,
            )
            outputs = (y.view(x.shape), final_state.view(initial_state.shape))
            dx, ddt, dA, dB, dC, dD, dh0 = torch.autograd.grad(outputs, leaves, (dy, dht))
        first = slice(None, None, per_group)  # head g * R of each group g
        return dx, ddt, dA, dB[:, :, first].contiguous(), dC[:, :, first].contiguous(), dD, dh0
