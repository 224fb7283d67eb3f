"""DEFECT: matmul with TF32 products (tl.dot's default on Ampere and later) where the
reference promises IEEE fp32 (torch.backends.cuda.matmul.allow_tf32 is False by default).

TF32 keeps 10 fraction bits: errors ~1e-3 relative, far outside the fp32 bound.
Must be rejected by PRC-01 (device only: the interpreter computes tl.dot in IEEE fp32).
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
        acc += tl.dot(a, b, input_precision="tf32")  # DEFECT: TF32 products
    tl.store(
        c_ptr + rm[:, None] * scm + rn[None, :] * scn,
        acc.to(c_ptr.dtype.element_ty),
        mask=(rm[:, None] < M) & (rn[None, :] < N),
    )


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        (m, k), n = a.shape, b.shape[1]
        c = torch.empty((m, n), dtype=torch.result_type(a, b), device=a.device)
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
