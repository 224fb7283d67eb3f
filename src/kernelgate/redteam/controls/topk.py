"""Honest candidate: top-k by k rounds of selection in Triton.

Each element gets one int64 order key: its value's float bits made monotonic (every NaN
above +inf, -0 equal to +0, as ``torch.topk`` orders them) in the high word and
``2**31 - 1 - column`` in the low word, so a larger key is a larger value or, among equal
values, a lower column. Round i picks the largest key below the previous pick's: one max
reduction a round and no separate NaN or tie bookkeeping, and the picks come out sorted,
ties lowest index first. The value is loaded from the picked column, so it is exact (-0
stays -0). A program holds at most 1024 elements: a row of up to 1024, loaded once for all
k rounds, with as many rows beside it as fit (up to 16); a longer row alone, scanned in
1024-element tiles each round, so registers stay at one tile whatever the row length. The
launch is the same on CPU and GPU, so the specializations the CPU judge compiles offline
for RES-02 are the ones the device runs.

Why: the previous version (2-D tiles of 4 rows a program on a GPU, 16 under the
interpreter, with separate value, index and NaN bookkeeping) spilled, which RES-02 rejects
(budget 0): on the H200 (Triton 3.6) 4 bytes; offline for sm_90 with Triton 3.6, 8 bytes
at 4 rows (BLOCK 64, 16-bit inputs) and 4 at 16 rows, with Triton 3.9's ptxas flags 8 at
16 rows, up to 224 registers. This one, over 624 specializations (k 1 to 64, widths 1 to
4096, 1 and 14 rows, fp32, bf16, fp16, aligned and offset inputs; sm_90 offline,
``benchmarks/topk_resources.py``): no spill with Triton 3.6 or 3.9, under either's ptxas
flags; at most 120 registers (3.6) and 96 (3.9), in the 16-row 64-column tiles.

Defect: none. Expected verdict: PASS (every gate).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

LOWEST = tl.constexpr(-(2**63))  # below every element's order key: "no pick yet"
TILE = 1024  # elements a program holds at once (rows x columns): at most 8 a thread


@triton.jit
def _order_keys(row_ptr, row_ok, cols, n_cols):
    """Each element's int64 order key (LOWEST outside the row): value bits, then column."""
    inside = row_ok & (cols < n_cols)
    x = tl.load(row_ptr + cols, mask=inside, other=0.0).to(tl.float32)
    bits = x.to(tl.int32, bitcast=True)
    key = bits ^ ((bits >> 31) & 0x7FFFFFFF)  # negative floats: flip all but the sign
    key = tl.where(x == 0.0, 0, key)  # -0 ties with +0
    key = tl.where(x != x, 0x7FFFFFFF, key)  # every NaN above +inf's 0x7F800000
    packed = (key.to(tl.int64) << 32) | (0x7FFFFFFF - cols).to(tl.int64)
    return tl.where(inside, packed, LOWEST)


@triton.jit
def _topk_select(
    x_ptr, values_ptr, indices_ptr, n_rows, n_cols, x_row_stride,
    K: tl.constexpr, ROWS: tl.constexpr, BLOCK: tl.constexpr, ONE_TILE: tl.constexpr,
):  # fmt: skip
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)
    row_ok = rows < n_rows
    row_ptr = x_ptr + rows.to(tl.int64) * x_row_stride
    cols = tl.arange(0, BLOCK)[None, :]
    if ONE_TILE:  # the whole row fits: load it once for all k rounds
        tile = _order_keys(row_ptr[:, None], row_ok[:, None], cols, n_cols)
    last = tl.full((ROWS,), 2**63 - 1, dtype=tl.int64)  # before the first pick: all below
    for i in range(K):
        if ONE_TILE:
            best = tl.max(tl.where(tile < last[:, None], tile, LOWEST), axis=1)
        else:
            best = tl.full((ROWS,), LOWEST, dtype=tl.int64)
            for start in range(0, n_cols, BLOCK):
                keys = _order_keys(row_ptr[:, None], row_ok[:, None], start + cols, n_cols)
                below = tl.where(keys < last[:, None], keys, LOWEST)
                best = tl.maximum(best, tl.max(below, axis=1))
        index = 0x7FFFFFFF - (best & 0xFFFFFFFF)
        out = rows.to(tl.int64) * K + i
        value = tl.load(row_ptr + index, mask=row_ok)  # the element itself: exact, -0 kept
        tl.store(values_ptr + out, value, mask=row_ok)
        tl.store(indices_ptr + out, index, mask=row_ok)
        last = best


class ModelNew(nn.Module):
    """Top-k along the last dim of a 2-D tensor, largest first."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        values = torch.empty((n_rows, self.k), dtype=x.dtype, device=x.device)
        indices = torch.empty((n_rows, self.k), dtype=torch.int64, device=x.device)
        block = min(TILE, triton.next_power_of_2(n_cols))
        rows = min(16, TILE // block)  # short rows share a program; the same on CPU and GPU
        _topk_select[(triton.cdiv(n_rows, rows),)](
            x, values, indices, n_rows, n_cols, x.stride(0),
            K=self.k, ROWS=rows, BLOCK=block, ONE_TILE=n_cols <= block,
            num_warps=max(1, rows * block // 256),
        )  # fmt: skip
        return values, indices
