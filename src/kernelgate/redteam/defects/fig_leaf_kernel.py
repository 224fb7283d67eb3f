"""Defect (AUTH-01): an eager PyTorch port of the MLP with a fig-leaf Triton kernel.

Both GEMMs run in torch (F.linear, torch.matmul: cuBLAS on a device, aten on the CPU) and so
do the ReLU and the bias adds; the only kernel of its own copies the second layer's bias
(256 elements, one program) before torch adds it. Every value is right, so every gate
passes: what is wrong is that it is not a kernel. AUTH-01 (at least half the device time in
the candidate's own kernels) must reject it, on the CPU as on a device: the GEMMs are
4.3 GFLOP, the copy one program (the interpreter's cost is per program, so even on the CPU,
where it inflates authored time, the GEMMs outweigh it).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def _copy_bias(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, hidden: int, out_features: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(in_features, hidden)
        self.fc2 = nn.Linear(hidden, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(F.linear(x, self.fc1.weight, self.fc1.bias))
        bias = torch.empty_like(self.fc2.bias)
        n = bias.numel()
        _copy_bias[(1,)](self.fc2.bias, bias, n, BLOCK=triton.next_power_of_2(n))
        return torch.matmul(h, self.fc2.weight.t()) + bias
