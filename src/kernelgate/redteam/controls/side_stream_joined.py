"""Control: the softmax kernel launched on a side CUDA stream, joined back before returning.

The worker delays every side stream on purpose (sandbox/streams.py); a candidate that makes
the caller's stream wait for its side stream must still pass every gate. On the CPU there
are no streams and the launch runs inline.
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
        block = triton.next_power_of_2(n_cols)
        if self._stream is None:
            out = torch.empty_like(x)
            _softmax_kernel[(n_rows,)](x, out, x.stride(0), out.stride(0), n_cols, BLOCK=block)
            return out
        caller = torch.cuda.current_stream()
        self._stream.wait_stream(caller)  # x is ready before the side stream reads it
        with torch.cuda.stream(self._stream):
            out = torch.empty_like(x)
            _softmax_kernel[(n_rows,)](x, out, x.stride(0), out.stride(0), n_cols, BLOCK=block)
        caller.wait_stream(self._stream)  # the join the defective twin leaves out
        out.record_stream(caller)
        return out
