"""DEFECT (RES-01 with --sanitize): program 0 also reads one float 1 GiB past the input.

The value read only feeds a comparison that is false for any finite value, so the output
is x * 0.5 in practice; what the test looks at is compute-sanitizer memcheck's report.
Device only: under the CPU interpreter this read would touch arbitrary host memory.
"""

import torch
import triton
import triton.language as tl

FAR = 1 << 28  # elements: 1 GiB of float32 past the end, outside every allocation


@triton.jit
def _half_oob_kernel(x_ptr, out_ptr, n, FAR: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(x_ptr + offs, mask=mask) * 0.5
    far = tl.load(x_ptr + n + FAR + tl.arange(0, 1), mask=(tl.arange(0, 1) + pid) == 0)
    junk = tl.sum(far, axis=0)
    y = tl.where(junk == junk + 1.0, y + 1.0, y)  # never true for a finite value
    tl.store(out_ptr + offs, y, mask=mask)


class ModelNew(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        _half_oob_kernel[(triton.cdiv(n, 256),)](x, out, n, FAR=FAR, BLOCK=256)
        return out
