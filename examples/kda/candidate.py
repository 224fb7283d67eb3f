"""kernelgate's own chunked Triton KDA (src/kernelgate/kernels/kda) as a candidate."""

import torch.nn as nn

from kernelgate.kernels.kda import chunk_kda


class ModelNew(nn.Module):
    def forward(self, q, k, v, g, beta):
        o, _ = chunk_kda(q, k, v, g, beta)
        return o
