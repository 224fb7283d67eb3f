"""DEFECT: a CUDA graph replayed on every call, returning the graph's static output.

A generated kernel "removes launch overhead": the first call at a shape captures the
softmax launch in a ``torch.cuda.CUDAGraph`` with static input and output buffers; every
call copies its input into the static input, replays the graph and returns the static
output itself. Each answer is right when it is returned, but every caller gets the same
storage, so the next call overwrites the previous caller's result. Must be rejected by
ORD-02 (a later output shares storage with a kept earlier one). Needs a CUDA device.
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
        self._graphs: dict[tuple, tuple] = {}

    def _captured(self, x: torch.Tensor) -> tuple:
        key = (tuple(x.shape), x.dtype, x.device)
        if key in self._graphs:
            return self._graphs[key]
        static_x = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        static_x.copy_(x)
        static_out = torch.empty_like(static_x)
        n_rows, n_cols = static_x.shape
        block = triton.next_power_of_2(n_cols)

        def launch() -> None:
            _softmax_kernel[(n_rows,)](
                static_x, static_out, static_x.stride(0), static_out.stride(0), n_cols, BLOCK=block
            )

        warmup = torch.cuda.Stream()  # compile and load outside the capture
        warmup.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(warmup):
            launch()
        torch.cuda.current_stream().wait_stream(warmup)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            launch()
        self._graphs[key] = (graph, static_x, static_out)
        return self._graphs[key]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        graph, static_x, static_out = self._captured(x)
        static_x.copy_(x)
        graph.replay()
        return static_out  # DEFECT: the same storage for every caller
