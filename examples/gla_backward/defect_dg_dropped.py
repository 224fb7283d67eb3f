"""A defective backward candidate: dg is never computed (zeros), as when the decay is
wrongly treated as a constant (a gate fed through a detach). Everything else is
candidate.py's. CMP-01 rejects it (tests/kernels/test_family_backward_examples.py)."""

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
            dq, dk, dv, dg, dh0 = torch.autograd.grad((o, final_state), leaves, (do, dht))
        return dq, dk, dv, torch.zeros_like(dg), dh0
