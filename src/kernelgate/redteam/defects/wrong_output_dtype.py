"""DEFECT: fp16 matmul that returns its fp32 accumulator instead of an fp16 result (the
values are even more accurate, but the output dtype breaks the contract: callers that
concatenate, pack or compare bytes see the wrong type and twice the memory).
Must be rejected by PRC-01 (output dtype) or CMP-01 (output structure).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _matmul(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    K,
    sam,
    sak,
    sbk,
    sbn,
    scm,
    scn,
    BM: tl.constexpr,
    BN: tl.constexpr,
    BK: tl.constexpr,
):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    acc = tl.zeros((BM, BN), tl.float32)
    for k0 in range(0, K, BK):
        rk = k0 + tl.arange(0, BK)
        a = tl.load(
            a_ptr + rm[:, None] * sam + rk[None, :] * sak,
            mask=(rm[:, None] < M) & (rk[None, :] < K),
            other=0.0,
        ).to(tl.float32)
        b = tl.load(
            b_ptr + rk[:, None] * sbk + rn[None, :] * sbn,
            mask=(rk[:, None] < K) & (rn[None, :] < N),
            other=0.0,
        ).to(tl.float32)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    tl.store(
        c_ptr + rm[:, None] * scm + rn[None, :] * scn,
        acc,
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        (m, k), n = a.shape, b.shape[1]
        c = torch.empty((m, n), dtype=torch.float32, device=a.device)  # DEFECT: fp32 output
        grid = (triton.cdiv(m, 32), triton.cdiv(n, 32))
        _matmul[grid](
            a,
            b,
            c,
            m,
            n,
            k,
            a.stride(0),
            a.stride(1),
            b.stride(0),
            b.stride(1),
            c.stride(0),
            c.stride(1),
            BM=32,
            BN=32,
            BK=32,
        )
        return c
