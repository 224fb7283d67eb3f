"""DEFECT: launches the kernel on a side CUDA stream and returns without synchronising, so a
timer on the default stream sees almost nothing and a reader on the default stream may see
the output before it is written.

Must be rejected by CMP-01 / MEM-01 / ORD-02 on a device (device only: CPU mode has no
streams, and the interpreter runs the launch synchronously).
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, out_ptr, x_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    num = tl.exp(x - tl.max(x, axis=0))
    out = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_stride + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self._stream = torch.cuda.Stream() if torch.cuda.is_available() else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        n_rows, n_cols = x.shape
        out = torch.empty_like(x)
        block = triton.next_power_of_2(n_cols)
        if self._stream is None:
            _softmax_kernel[(n_rows,)](x, out, x.stride(0), out.stride(0), n_cols, BLOCK=block)
            return out
        self._stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self._stream):  # DEFECT: no synchronisation before returning
            for _ in range(8):  # long enough that the default stream reads early
                _softmax_kernel[(n_rows,)](x, out, x.stride(0), out.stride(0), n_cols, BLOCK=block)
        return out
