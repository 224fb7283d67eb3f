"""kernelgate's own chunked Triton DeltaNet (src/kernelgate/kernels/delta_rule) as a candidate."""

import torch.nn as nn

from kernelgate.kernels.delta_rule import chunk_delta_rule


class ModelNew(nn.Module):
    def forward(self, q, k, v, beta):
        o, _ = chunk_delta_rule(q, k, v, beta)
        return o
