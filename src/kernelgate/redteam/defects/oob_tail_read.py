"""DEFECT: ReLU whose load has no mask while its store does: the last program reads
past the end of the input (129 * 33 = 4257 elements in blocks of 512: 351 lanes beyond).

The values come out right (the lanes past the end are never stored), so no value gate can
see it; on a GPU it reads whatever lies after the buffer and faults when that is unmapped.
Must be rejected by RES-01 (the interpreter's access trace: loads outside every live
allocation, here the input's guard band).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs).to(tl.float32)  # DEFECT: no mask on the tail block
    y = tl.where(x < 0.0, 0.0, x)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _relu_kernel[(triton.cdiv(n, 512),)](x, out, n, BLOCK=512)
        return out
