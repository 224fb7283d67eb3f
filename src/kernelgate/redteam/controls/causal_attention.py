"""Honest candidate: causal flash attention in Triton (online softmax, float32 state).

One program per block of queries and (batch, head). It walks the key blocks up to the
diagonal, keeps the running row max, the running denominator and the output accumulator
in float32, and masks the diagonal block (keys above the query) and the sequence tail.
The bf16 tiles are widened to float32 before ``tl.dot`` with IEEE products (bf16 ``tl.dot``
is wrong under the Triton interpreter, and float32 is at least as accurate on a GPU);
the output is rounded to bf16 once. A row whose every score is -inf (an Inf in q or k can make
one) gets what ``F.scaled_dot_product_attention`` gives it: weights 0, not 0 / 0.

Defect: none. Expected verdict: PASS (every gate).
"""

import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _causal_attention(
    q_ptr, k_ptr, v_ptr, out_ptr, seq, scale,
    head_dim, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    head_offset = tl.program_id(1).to(tl.int64) * seq * head_dim
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    dim_ok = dims < head_dim
    row_ok = rows < seq
    q_ok = row_ok[:, None] & dim_ok[None, :]
    q = tl.load(q_ptr + head_offset + rows[:, None] * head_dim + dims[None, :], mask=q_ok).to(
        tl.float32
    )
    row_max = tl.full((BLOCK_M,), -float("inf"), dtype=tl.float32)
    denominator = tl.zeros((BLOCK_M,), dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), dtype=tl.float32)
    last_key = tl.minimum((tl.program_id(0) + 1) * BLOCK_M, seq)
    for start in range(0, last_key, BLOCK_N):
        keys = start + tl.arange(0, BLOCK_N)
        key_ok = keys < seq
        kv_ok = key_ok[:, None] & dim_ok[None, :]
        k = tl.load(k_ptr + head_offset + keys[:, None] * head_dim + dims[None, :], mask=kv_ok).to(
            tl.float32
        )
        v = tl.load(v_ptr + head_offset + keys[:, None] * head_dim + dims[None, :], mask=kv_ok).to(
            tl.float32
        )
        scores = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        visible = key_ok[None, :] & (keys[None, :] <= rows[:, None])
        scores = tl.where(visible, scores, -float("inf"))
        new_max = tl.maximum(row_max, tl.max(scores, axis=1))
        # a row whose every score so far is -inf subtracts 0, not -inf (-inf - -inf is NaN)
        shift = tl.where(new_max == -float("inf"), 0.0, new_max)
        p = tl.exp(scores - shift[:, None])
        p = tl.where(visible, p, 0.0)
        rescale = tl.exp(row_max - shift)
        denominator = denominator * rescale + tl.sum(p, axis=1)
        acc = acc * rescale[:, None] + tl.dot(p, v, input_precision="ieee")
        row_max = new_max
    # SDPA's convention for a row whose every score is -inf: weights 0, so the output is
    # 0 x v (0, or NaN where v holds an Inf or NaN), not 0 / 0
    out = acc / tl.where(denominator == 0.0, 1.0, denominator)[:, None]
    tl.store(
        out_ptr + head_offset + rows[:, None] * head_dim + dims[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=q_ok,
    )


class ModelNew(nn.Module):
    """Causal attention over (batch, heads, seq, head_dim) tensors."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        batch, heads, seq, head_dim = q.shape
        out = torch.empty_like(q)
        grid = (triton.cdiv(seq, 32), batch * heads)
        _causal_attention[grid](
            q, k, v, out, seq, 1.0 / math.sqrt(head_dim),
            head_dim, BLOCK_D=max(16, triton.next_power_of_2(head_dim)), BLOCK_M=32, BLOCK_N=32,
        )  # fmt: skip
        return out
