"""A defective backward candidate: dbeta is never computed (zeros), as when a gate is
wrongly treated as a constant. Everything else is candidate.py's. CMP-01 rejects it
(tests/kernels/test_gdn_backward_example.py)."""

import torch
import torch.nn as nn

from kernelgate.kernels.gdn import chunk_gated_delta_rule


class ModelNew(nn.Module):
    def forward(self, q, k, v, g, beta, do, initial_state, dht):
        leaves = [x.detach().requires_grad_() for x in (q, k, v, g, beta, initial_state)]
        with torch.enable_grad():
            o, final_state = chunk_gated_delta_rule(
                *leaves[:5], initial_state=leaves[5], output_final_state=True
            )
            dq, dk, dv, dg, dbeta, dh0 = torch.autograd.grad((o, final_state), leaves, (do, dht))
        return dq, dk, dv, dg, torch.zeros_like(dbeta), dh0
