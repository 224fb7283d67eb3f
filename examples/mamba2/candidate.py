"""kernelgate's own chunked Triton Mamba-2 SSD (src/kernelgate/kernels/mamba2) as a candidate.

The reference keeps heads as [groups, heads per group] so that every shape the gates try has
H % G == 0; the candidate flattens them to Mamba-2's [H] with head h = g * R + r, which is the
grouping chunk_ssd uses (head h reads group h // R)."""

import torch.nn as nn

from kernelgate.kernels.mamba2 import chunk_ssd


class ModelNew(nn.Module):
    def forward(self, x, dt, A, B, C, D):
        batch, steps, groups, per_group, dim_p = x.shape
        heads = groups * per_group
        y, _ = chunk_ssd(
            x.reshape(batch, steps, heads, dim_p),
            dt.reshape(batch, steps, heads),
            A.reshape(heads),
            B,
            C,
            D.reshape(heads),
        )
        return y.view(batch, steps, groups, per_group, dim_p)
