"""TIMING HACK: work left running on a side stream: the kernel is launched on a stream of
its own, after a long spin there, and the call returns without joining it.

Events recorded on the caller's stream around the call (KernelBench's method) see only the
launch. The judge's end event is recorded after a device-wide synchronize, so the spin and
the kernel are inside the interval: no speedup it did not earn. Device only: the CPU has
no streams.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl

SPIN_CYCLES = 2_000_000  # about 1 ms at an H200's clock: work the caller's stream never sees


@triton.jit
def _softmax_kernel(x_ptr, out_ptr, x_stride, out_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
    num = tl.exp(x - tl.max(x, axis=0))
    out = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_stride + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def _softmax(x: torch.Tensor, out: torch.Tensor) -> None:
    n_rows, n_cols = x.shape
    block = triton.next_power_of_2(n_cols)
    _softmax_kernel[(n_rows,)](x, out, x.stride(0), out.stride(0), n_cols, BLOCK=block)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self._stream = torch.cuda.Stream() if torch.cuda.is_available() else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        if self._stream is None:
            _softmax(x, out)
            return out
        self._stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self._stream):  # HACK: never joined back
            torch.cuda._sleep(SPIN_CYCLES)
            _softmax(x, out)
        return out
