"""DEFECT: the output is a tensor subclass that runs the softmax kernel whenever it is read.

A generated kernel "avoids materialising" its result: forward returns an object shaped like
the output that holds the caller's input and computes the softmax when anything reads it
(CUDA-L1's h100 L1/T9 returns a lazy matmul of this kind). Every read taken right after the
call is right, so a check that compares at once passes. But it is not a result: once the
caller writes new data into its input buffer, as callers reusing buffers do, the result it
holds changes. Must be rejected by ORD-02 (a kept output changes after the next call writes
its inputs into the kept call's input buffers). tests/test_authorship.py also uses it: the
kernel it runs when read must be in AUTH-01's profile of the call.
"""

from typing import Any

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
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    out = num / tl.sum(num, axis=0)
    tl.store(out_ptr + row * out_stride + cols, out.to(out_ptr.dtype.element_ty), mask=mask)


def _softmax(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    n_rows, n_cols = x.shape
    out = torch.empty_like(x)
    block = triton.next_power_of_2(n_cols)
    _softmax_kernel[(n_rows,)](x, out, x.stride(0), out.stride(0), n_cols, BLOCK=block)
    return out


class LazySoftmax(torch.Tensor):
    """Shaped like the result; holds the caller's input until it is read."""

    @staticmethod
    def __new__(cls, x: torch.Tensor) -> "LazySoftmax":
        made = torch.Tensor._make_subclass(cls, torch.empty(0, dtype=x.dtype, device=x.device))
        made.source = x  # DEFECT: a reference to the caller's buffer, not a value
        return made

    @property
    def shape(self) -> torch.Size:
        return self.source.shape

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        args = [_softmax(a.source) if isinstance(a, cls) else a for a in args]
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return LazySoftmax(x)
