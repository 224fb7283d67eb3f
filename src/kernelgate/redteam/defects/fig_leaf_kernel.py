"""Defect (AUTH-01): an eager PyTorch port of the MLP with a fig-leaf Triton kernel.

Both GEMMs run in torch (F.linear, torch.matmul: cuBLAS on a device, aten on the CPU) and so
does the ReLU; the only kernel of its own adds the second layer's bias to the output. Every
value is right, so every gate passes: what is wrong is that it is not a kernel. AUTH-01
(at least half the device time in the candidate's own kernels) must reject it, on the CPU
as on a device: the GEMMs are 268 MFLOP, the bias add 32k elements.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _add_bias(out_ptr, bias_ptr, n_elements, n_cols, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n_elements
    y = tl.load(out_ptr + offs, mask=mask)
    b = tl.load(bias_ptr + offs % n_cols, mask=mask)
    tl.store(out_ptr + offs, y + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, hidden: int, out_features: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(F.linear(x, self.fc1.weight, self.fc1.bias))
        out = torch.matmul(h, self.fc2.weight.t()).contiguous()
        n = out.numel()
        block = 1024
        _add_bias[(triton.cdiv(n, block),)](out, self.fc2.bias, n, out.shape[-1], BLOCK=block)
        return out
