"""Defect: a wrong group-scale index. The scale's group is computed from the packed byte
index (``byte // group``) instead of the input column (``2 * byte // group``): the first
half of the groups' scales is spread over all columns and the second half never used.

Expected verdict: REJECT by CMP-01.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _w4a16_kernel(
    x_ptr, packed_ptr, scales_ptr, out_ptr,
    M, N, K,
    x_stride, packed_stride, scales_stride, out_stride,
    GROUP: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_B: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for start in range(0, tl.cdiv(K, 2), BLOCK_B):
        byte = start + tl.arange(0, BLOCK_B)  # packed byte j holds input columns 2j and 2j+1
        even = 2 * byte
        byte_ok = even < K
        x_even = tl.load(
            x_ptr + rows[:, None] * x_stride + even[None, :],
            mask=(rows[:, None] < M) & byte_ok[None, :],
            other=0.0,
        ).to(tl.float32)
        x_odd = tl.load(
            x_ptr + rows[:, None] * x_stride + even[None, :] + 1,
            mask=(rows[:, None] < M) & (even[None, :] + 1 < K),
            other=0.0,
        ).to(tl.float32)
        w_ok = (cols[:, None] < N) & byte_ok[None, :]
        packed = tl.load(packed_ptr + cols[:, None] * packed_stride + byte[None, :], mask=w_ok)
        packed = packed.to(tl.int32)
        scale = tl.load(
            # DEFECT: the group of the packed byte index, not of the input column.
            scales_ptr + cols[:, None] * scales_stride + byte[None, :] // GROUP,
            mask=w_ok,
        ).to(tl.float32)
        w_even = ((packed & 0xF) - 8).to(tl.float32) * scale
        w_odd = ((packed >> 4) - 8).to(tl.float32) * scale
        w_even = tl.where(w_ok, w_even, 0.0)
        w_odd = tl.where(w_ok, w_odd, 0.0)
        acc += tl.dot(x_even, tl.trans(w_even), input_precision="ieee")
        acc += tl.dot(x_odd, tl.trans(w_odd), input_precision="ieee")
    out_ok = (rows[:, None] < M) & (cols[None, :] < N)
    tl.store(out_ptr + rows[:, None] * out_stride + cols[None, :], acc, mask=out_ok)


class ModelNew(nn.Module):
    """``x @ dequantize(packed, scales).T`` for int4 weights packed two a byte."""

    def __init__(self, group_size: int) -> None:
        super().__init__()
        self.group_size = group_size

    def forward(self, x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        x, packed, scales = x.contiguous(), packed.contiguous(), scales.contiguous()
        m, k = x.shape
        n = packed.shape[0]
        out = torch.empty((m, n), dtype=x.dtype, device=x.device)
        grid = (triton.cdiv(m, 16), triton.cdiv(n, 32))
        _w4a16_kernel[grid](
            x, packed, scales, out, m, n, k,
            x.stride(0), packed.stride(0), scales.stride(0), out.stride(0),
            GROUP=self.group_size, BLOCK_M=16, BLOCK_N=32, BLOCK_B=32,
        )  # fmt: skip
        return out
