"""TIMING HACK: returns before the work ends: a host thread computes the output after the
call has returned.

A timer stopped when the call returns measures nothing; whoever reads the output a little
later (after a synchronize, a copy, a print) sees the right values. The judge copies every
trial's outputs as soon as its interval ends and checks sampled ones against the oracle:
the copies hold the empty output's garbage, and no speedup is verified.
"""

import threading

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


def _softmax(x: torch.Tensor, out: torch.Tensor) -> None:
    n_rows, n_cols = x.shape
    block = triton.next_power_of_2(n_cols)
    _softmax_kernel[(n_rows,)](x, out, x.stride(0), out.stride(0), n_cols, BLOCK=block)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        worker = threading.Thread(target=_softmax, args=(x, out), daemon=True)
        worker.start()  # HACK: nobody waits for it
        return out
