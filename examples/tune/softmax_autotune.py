"""Tunable candidate: row softmax with a ``@triton.autotune`` config list (all honest).

Each config sets ``ROWS`` (rows per program) and ``num_warps``; the launch grid follows
``ROWS``. The tuner pins the autotuner to one config at a time (``autotune:_softmax_kernel``
knob); on a GPU, Triton's own pick (its autotuner timing every config) is measured beside.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.autotune(
    configs=[
        triton.Config({"ROWS": 1}, num_warps=1),
        triton.Config({"ROWS": 1}, num_warps=4),
        triton.Config({"ROWS": 2}, num_warps=2),
        triton.Config({"ROWS": 4}, num_warps=4),
        triton.Config({"ROWS": 4}, num_warps=8),
    ],
    key=["n_cols"],
)
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
):
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    for r in tl.static_range(ROWS):
        row = tl.program_id(0) * ROWS + r
        if row < n_rows:
            x = tl.load(x_ptr + row * x_row_stride + cols, mask=mask, other=-float("inf"))
            x = x.to(tl.float32)
            x = x - tl.max(x, axis=0)
            num = tl.exp(x)
            tl.store(out_ptr + row * out_row_stride + cols, num / tl.sum(num, axis=0), mask=mask)


class ModelNew(nn.Module):
    """Row softmax (dim=1); rows per program chosen by the autotuner (or the tuner's pin)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)

        def grid(meta: dict) -> tuple[int]:
            return (triton.cdiv(n_rows, meta["ROWS"]),)

        _softmax_kernel[grid](
            x,
            out,
            x.stride(0),
            out.stride(0),
            n_rows,
            n_cols,
            BLOCK=triton.next_power_of_2(n_cols),
        )
        return out
