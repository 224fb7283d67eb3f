"""DEFECT (RES-02): a 256 x 256 x 256 fp32 tl.dot stages 512 KiB of operands in shared memory.

The values are exact on the CPU (x times 0.5 * identity, accumulated in fp32), but the
compiled kernel asks for more than the 227 KiB of shared memory a block may have.
"""

import torch
import triton
import triton.language as tl


@triton.jit
def _dot_half_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    rows = tl.arange(0, BLOCK)[:, None]
    cols = tl.arange(0, BLOCK)[None, :]
    flat = rows * BLOCK + cols
    mask = flat < n
    x = tl.load(x_ptr + flat, mask=mask, other=0.0)
    half_identity = tl.where(rows == cols, 0.5, 0.0)
    y = tl.dot(x, half_identity, input_precision="ieee")
    tl.store(out_ptr + flat, y, mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        _dot_half_kernel[(1,)](x, out, x.numel(), BLOCK=256)
        return out
