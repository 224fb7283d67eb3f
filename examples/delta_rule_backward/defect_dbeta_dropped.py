"""A defective backward candidate: dbeta is never computed (zeros), as when the write
strength is wrongly treated as a constant. Everything else is candidate.py's. CMP-01 rejects
it (tests/kernels/test_family_backward_examples.py)."""

import torch
import torch.nn as nn

from kernelgate.kernels.delta_rule import chunk_delta_rule


class ModelNew(nn.Module):
    def forward(self, q, k, v, beta, do, initial_state, dht):
        leaves = [x.detach().requires_grad_() for x in (q, k, v, beta, initial_state)]
        with torch.enable_grad():
            o, final_state = chunk_delta_rule(
                *leaves[:4], initial_state=leaves[4], output_final_state=True
            )
            dq, dk, dv, dbeta, dh0 = torch.autograd.grad((o, final_state), leaves, (do, dht))
        return dq, dk, dv, torch.zeros_like(dbeta), dh0
