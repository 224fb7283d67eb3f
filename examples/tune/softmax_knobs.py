"""Tunable candidate: row softmax in three passes over column chunks, with declared knobs.

Knobs (``KERNELGATE_KNOBS``, read back from ``KERNELGATE_KNOB_VALUES``, docs/usage.md):
``BLOCK`` columns per chunk, ``ROWS`` rows per program, ``SPLIT`` chunks per loop
iteration, ``num_warps``. Every value is right except one:

Defect (SPLIT=2 only): the loops stop at ``n_cols`` rounded down to a multiple of
``2 * BLOCK``, so the columns past it (the tail) are never read nor written. Fewer loop
trips make it the fastest config at most shapes, which is the point: the tuner must never
choose it, however fast (CMP-01 / MEM-01 reject it). With SPLIT=1 every config verifies.
"""

import json
import os

import torch
import torch.nn as nn
import triton
import triton.language as tl

KERNELGATE_KNOBS = {
    "BLOCK": [128, 256, 512],
    "ROWS": [1, 2],
    "SPLIT": [1, 2],
    "num_warps": [1, 4],
}
# The tuner sets KERNELGATE_KNOB_VALUES for each config; elsewhere these defaults hold.
KNOBS = {"BLOCK": 256, "ROWS": 1, "SPLIT": 1, "num_warps": 4}
KNOBS |= json.loads(os.environ.get("KERNELGATE_KNOB_VALUES", "{}"))


@triton.jit
def _softmax_kernel(
    x_ptr,
    out_ptr,
    x_row_stride,
    out_row_stride,
    n_rows,
    n_cols,
    BLOCK: tl.constexpr,
    ROWS: tl.constexpr,
    SPLIT: tl.constexpr,
):
    offsets = tl.arange(0, BLOCK)
    # DEFECT when SPLIT > 1: the tail past the last whole SPLIT * BLOCK is dropped
    stop = n_cols if SPLIT == 1 else (n_cols // (BLOCK * SPLIT)) * (BLOCK * SPLIT)
    for r in tl.static_range(ROWS):
        row = tl.program_id(0) * ROWS + r
        if row < n_rows:
            x_row = x_ptr + row * x_row_stride
            out_row = out_ptr + row * out_row_stride
            top = tl.full((BLOCK,), -float("inf"), tl.float32)
            for start in range(0, stop, BLOCK * SPLIT):
                for part in tl.static_range(SPLIT):
                    cols = start + part * BLOCK + offsets
                    x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf"))
                    top = tl.maximum(top, x.to(tl.float32))
            m = tl.max(top, axis=0)
            total = tl.zeros((BLOCK,), tl.float32)
            for start in range(0, stop, BLOCK * SPLIT):
                for part in tl.static_range(SPLIT):
                    cols = start + part * BLOCK + offsets
                    x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf"))
                    total += tl.where(cols < n_cols, tl.exp(x.to(tl.float32) - m), 0.0)
            s = tl.sum(total, axis=0)
            for start in range(0, stop, BLOCK * SPLIT):
                for part in tl.static_range(SPLIT):
                    cols = start + part * BLOCK + offsets
                    x = tl.load(x_row + cols, mask=cols < n_cols, other=-float("inf"))
                    y = tl.exp(x.to(tl.float32) - m) / s
                    tl.store(out_row + cols, y, mask=cols < n_cols)


class ModelNew(nn.Module):
    """Row softmax (dim=1) of a 2-D tensor, launched with the knobs above."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        rows = KNOBS["ROWS"]
        _softmax_kernel[(triton.cdiv(n_rows, rows),)](
            x,
            out,
            x.stride(0),
            out.stride(0),
            n_rows,
            n_cols,
            BLOCK=KNOBS["BLOCK"],
            ROWS=rows,
            SPLIT=KNOBS["SPLIT"],
            num_warps=KNOBS["num_warps"],
        )
        return out
