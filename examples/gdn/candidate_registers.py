"""kernelgate's chunked Triton Gated DeltaNet with the opt-in register-resident forward
(``chunk.FORWARD = "registers"``: chunk_fwd_fast.py's three kernels, tf32x3 dots) as a
candidate for the forward contract.

It exists so that the twelve gates judge that path exactly as they judged the default
("staged", candidate.py) before the default may change. The setting is a module global read
at every call, so it is set explicitly around each call and restored after: the candidate
judges the path it names whatever the default is, and loading it beside other code (a test
process) leaves that code's setting alone."""

import torch
import torch.nn as nn

from kernelgate.kernels.gdn import chunk as gdn_chunk
from kernelgate.kernels.gdn import chunk_gated_delta_rule


class ModelNew(nn.Module):
    def forward(self, q, k, v, g, beta):
        previous = gdn_chunk.FORWARD
        gdn_chunk.FORWARD = "registers"
        try:
            o, _ = chunk_gated_delta_rule(q, k, v, g, beta)
        finally:
            gdn_chunk.FORWARD = previous
        return o
