"""A Triton softmax whose store mask is off by a block: it writes past the end of its output."""

import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(x_ptr, out_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    out = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * n_cols + cols, out, mask=mask)
    # DEFECT: the last program also writes a few elements past the end of the output.
    extra = tl.arange(0, 16)
    is_last = (row == tl.num_programs(0) - 1).to(tl.int32)
    tl.store(
        out_ptr + (row + 1) * n_cols + extra,
        tl.zeros([16], dtype=tl.float32),
        mask=extra < 16 * is_last,
    )


class ModelNew(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        _kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return out
