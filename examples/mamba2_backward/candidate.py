"""kernelgate's chunked Triton Mamba-2 SSD backward (src/kernelgate/kernels/mamba2) as a
candidate for the backward contract: the forward kernels run on detached copies of the inputs
(so the caller's tensors are neither marked nor written), then torch.autograd.grad runs the
backward kernels with the given upstream gradients. Every returned gradient is a fresh tensor.

The reference keeps heads as [groups, heads per group] so that every shape the gates try has
H % G == 0; the leaves are flattened to Mamba-2's [H] with head h = g * R + r, the grouping
chunk_ssd uses (head h reads group h // R), so autograd hands back gradients in the
reference's shapes."""

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
            grads = torch.autograd.grad(outputs, leaves, (dy, dht))
        return tuple(grads)  # dx, ddt, dA, dB, dC, dD, dh0
