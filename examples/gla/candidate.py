"""kernelgate's own chunked Triton GLA (src/kernelgate/kernels/gla) as a candidate."""

import torch.nn as nn

from kernelgate.kernels.gla import chunk_gla


class ModelNew(nn.Module):
    def forward(self, q, k, v, g):
        o, _ = chunk_gla(q, k, v, g)
        return o
