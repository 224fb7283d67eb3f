"""A defective backward candidate: the per-key-channel gate's gradient is collapsed to one
value per head and step (its mean over the K channels, spread back), as when a KDA backward is
derived from Gated DeltaNet's scalar-gate one. The sum over channels is kept, so a check of
dg's total alone would not see it. Everything else is candidate.py's. CMP-01 rejects it
(tests/kernels/test_family_backward_examples.py)."""

import torch
import torch.nn as nn

from kernelgate.kernels.kda import chunk_kda


class ModelNew(nn.Module):
    def forward(self, q, k, v, g, beta, do, initial_state, dht):
        leaves = [x.detach().requires_grad_() for x in (q, k, v, g, beta, initial_state)]
        with torch.enable_grad():
            o, final_state = chunk_kda(*leaves[:5], initial_state=leaves[5], output_final_state=True)
            dq, dk, dv, dg, dbeta, dh0 = torch.autograd.grad((o, final_state), leaves, (do, dht))
        return dq, dk, dv, dg.mean(dim=-1, keepdim=True).expand_as(dg).clone(), dbeta, dh0
