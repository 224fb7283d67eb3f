"""Defect (CMP-02, unguarded precondition; device only): SiLU with 16-byte vector loads.

It makes its input contiguous and reads it as ``float4``: right wherever the data pointer is
16-byte aligned (every copy ``contiguous()`` makes is), and a real "misaligned address"
device fault on a contiguous view at an odd storage offset, which ``contiguous()`` returns
as it is. The precondition (a 16-byte-aligned data pointer) is never checked.
"""

import torch
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__device__ __forceinline__ float silu(float v) { return v / (1.f + expf(-v)); }

__global__ void silu_float4(const float* x, float* y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    long vectors = n / 4;
    if (i < vectors) {
        float4 v = reinterpret_cast<const float4*>(x)[i];  // assumes 16-byte alignment
        reinterpret_cast<float4*>(y)[i] = make_float4(silu(v.x), silu(v.y), silu(v.z), silu(v.w));
    }
    if (i < n - 4 * vectors) y[4 * vectors + i] = silu(x[4 * vectors + i]);
}

torch::Tensor silu(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    long n = xc.numel();
    long threads = 256, blocks = (n / 4 + threads) / threads + 1;
    silu_float4<<<blocks, threads>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

_module = load_inline(
    name="kernelgate_test_silu_float4",
    cpp_sources="torch::Tensor silu(torch::Tensor x);",
    cuda_sources=CUDA_SOURCE,
    functions=["silu"],
    verbose=False,
)


class ModelNew(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _module.silu(x)
