"""Defect: a dropped scale. The epilogue multiplies by the per-tensor activation scale but
forgets the per-channel weight scale.

Expected verdict: REJECT by CMP-01.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _fp8_linear_kernel(
    x_ptr, w_ptr, x_scale_ptr, w_scale_ptr, out_ptr,
    M, N, K,
    x_stride, w_stride, out_stride,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, K, BLOCK_K):
        ks = start + tl.arange(0, BLOCK_K)
        a = tl.load(
            x_ptr + rows[:, None] * x_stride + ks[None, :],
            mask=(rows[:, None] < M) & (ks[None, :] < K),
            other=0.0,
        ).to(tl.float32)
        b = tl.load(
            w_ptr + cols[:, None] * w_stride + ks[None, :],
            mask=(cols[:, None] < N) & (ks[None, :] < K),
            other=0.0,
        ).to(tl.float32)
        acc += tl.dot(a, tl.trans(b), input_precision="ieee")
    x_scale = tl.load(x_scale_ptr)
    out = acc * x_scale  # DEFECT: the per-channel weight scale is never applied
    out_ok = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(out_ptr + rows[:, None] * out_stride + cols[None, :], out, mask=out_ok)


class ModelNew(nn.Module):
    """fp8 x fp8 -> float32 linear layer with per-tensor and per-channel scales."""

    def forward(
        self, x: torch.Tensor, w: torch.Tensor, x_scale: torch.Tensor, w_scale: torch.Tensor
    ) -> torch.Tensor:
        x, w, w_scale = x.contiguous(), w.contiguous(), w_scale.contiguous()
        m, k = x.shape
        n = w.shape[0]
        out = torch.empty((m, n), dtype=x_scale.dtype, device=x.device)
        grid = (triton.cdiv(m, 16), triton.cdiv(n, 32))
        _fp8_linear_kernel[grid](
            x, w, x_scale, w_scale, out, m, n, k,
            x.stride(0), w.stride(0), out.stride(0),
            BLOCK_M=16, BLOCK_N=32, BLOCK_K=32,
        )  # fmt: skip
        return out
