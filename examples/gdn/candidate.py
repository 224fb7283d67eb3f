"""kernelgate's own chunked Triton Gated DeltaNet (src/kernelgate/kernels/gdn) as a candidate."""

import torch
import torch.nn as nn

from kernelgate.kernels.gdn import chunk_gated_delta_rule


class ModelNew(nn.Module):
    def forward(self, q, k, v, g, beta):
        o, _ = chunk_gated_delta_rule(q, k, v, g, beta)
        return o
