"""Small ``@triton.jit`` helpers for what every chunked kernel of the family repeats.

Every kernel of gdn (and delta_rule, which reuses gdn's), gla, kda and mamba2 opens with the
same program-index prelude, the (batch, head) of its program and the rows of its chunk,
and moves [rows, columns] tiles of row-major [*, D] tensors with the same masks. Written
once here, each kernel body reads as its math. Triton inlines jit helpers: each emits the
operations the kernels spelled out, in the same order, so results are bitwise unchanged;
register counts were checked offline for sm_90 with Triton 3.6 and 3.9 for every kernel
that uses them (benchmarks/gdn_bwd_resources.py, gla_kda_resources.py, ssd_resources.py).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def batch_head(i_bh, H):
    """(batch, head) of a flattened ``batch * H + head`` program index; the batch as int64,
    since it multiplies T * H * D in every address and that product can pass 2^31."""
    return (i_bh // H).to(tl.int64), i_bh % H


@triton.jit
def chunk_rows(i_b, i_h, i_n, T, H, C: tl.constexpr):
    """Chunk ``i_n``'s absolute steps t_idx, valid-step mask m_t (t < T: the last chunk is
    ragged) and rows (b, t, h) of a [B, T, H, *] tensor, int64 like ``i_b``."""
    t_idx = i_n * C + tl.arange(0, C)
    m_t = t_idx < T
    return t_idx, m_t, (i_b * T + t_idx) * H + i_h


@triton.jit
def load_tile(ptr, row, m_t, o_d, D: tl.constexpr):
    """Rows ``row`` (masked by m_t), columns o_d (< D) of a [*, D] row-major tensor, as fp32;
    masked elements read 0, so padded steps and channels add nothing to a dot."""
    return tl.load(
        ptr + row[:, None] * D + o_d[None, :], mask=m_t[:, None] & (o_d < D)[None, :], other=0.0
    ).to(tl.float32)


@triton.jit
def store_tile(ptr, row, m_t, o_d, D: tl.constexpr, value):
    """Store ``value`` to rows ``row`` (masked by m_t), columns o_d (< D) of a [*, D] row-major
    tensor, converted to its element type (a no-op for the fp32 intermediates)."""
    tl.store(
        ptr + row[:, None] * D + o_d[None, :],
        value.to(ptr.dtype.element_ty),
        mask=m_t[:, None] & (o_d < D)[None, :],
    )


@triton.jit
def chunk_base(i_b, i_h, i_n, T, H, C: tl.constexpr):
    """Chunk ``i_n``'s valid-step mask m_t and its first row (b, i_n * C, h) of a [B, T, H, *]
    tensor as one int64 scalar: gdn's kernels address inside the chunk with int32 offsets
    ``o_c * (H * D)`` from that base, which keeps per-element address registers small (see
    gdn/chunk_fwd.py's module docstring)."""
    m_t = i_n * C + tl.arange(0, C) < T
    return m_t, (i_b * T + i_n * C) * H + i_h
