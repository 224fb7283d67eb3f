"""Control: a CUDA extension built with load_inline (the usual KernelBench shape)."""

import os

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

os.environ.setdefault("TORCH_CUDA_ARCH_LIST", "9.0")

CUDA_SOURCE = r"""
#include <torch/extension.h>
__global__ void scale_kernel(const float* x, float* y, float s, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] * s;
}
torch::Tensor scale(torch::Tensor x, double s) {
    auto y = torch::empty_like(x);
    int n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), s, n);
    return y;
}
"""
CPP_SOURCE = "torch::Tensor scale(torch::Tensor x, double s);"

_module = None


def _extension():
    global _module
    if _module is None:
        _module = load_inline(
            name="scale_ext",
            cpp_sources=CPP_SOURCE,
            cuda_sources=CUDA_SOURCE,
            functions=["scale"],
            build_directory=os.path.join(os.getcwd(), "build"),
            verbose=False,
        )
    return _module


class ModelNew(nn.Module):
    def __init__(self, scale: float = 2.0):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 0:
            return x.clone()
        return _extension().scale(x.contiguous(), self.scale)
