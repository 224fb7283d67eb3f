"""kernelgate's chunked Triton Gated DeltaNet backward with the opt-in register-resident
paths (``chunk.FORWARD = "registers"`` and ``chunk.BACKWARD = "registers"``: chunk_fwd_fast.py
and chunk_bwd_fast.py, tf32x3 dots; the reverse scan is the shipped one in both paths) as a
candidate for the backward contracts, fp32 and bf16.

It exists so that the twelve gates judge those paths exactly as they judged the defaults
(candidate.py) before the defaults may change. Both settings are module globals read at every
call, so they are set explicitly around the call (the forward and autograd's backward both
run inside it) and restored after: the candidate judges the paths it names whatever the
defaults are, and loading it beside other code (a test process) leaves that code's settings
alone. As in candidate.py, the forward runs on detached copies of the inputs and every
returned gradient is a fresh tensor."""

import torch
import torch.nn as nn

from kernelgate.kernels.gdn import chunk as gdn_chunk
from kernelgate.kernels.gdn import chunk_gated_delta_rule


class ModelNew(nn.Module):
    def forward(self, q, k, v, g, beta, do, initial_state, dht):
        previous = gdn_chunk.FORWARD, gdn_chunk.BACKWARD
        gdn_chunk.FORWARD = gdn_chunk.BACKWARD = "registers"
        try:
            leaves = [x.detach().requires_grad_() for x in (q, k, v, g, beta, initial_state)]
            with torch.enable_grad():
                o, final_state = chunk_gated_delta_rule(
                    *leaves[:5], initial_state=leaves[5], output_final_state=True
                )
                grads = torch.autograd.grad((o, final_state), leaves, (do, dht))
        finally:
            gdn_chunk.FORWARD, gdn_chunk.BACKWARD = previous
        return tuple(grads)  # dq, dk, dv, dg, dbeta, dh0
