"""A candidate whose forward returns a lazy tensor: its own Triton softmax runs only when
the output is read (any torch function on it, asking for its storage included), not in the
call itself. What a caller reads is the kernel's work, so AUTH-01's profiled call must see
it (CUDA-L1 h100 L1/T9 returns a lazy matmul of this kind)."""

from typing import Any

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _lazy_row_softmax(src, dst, stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    keep = cols < n_cols
    x = tl.load(src + row * stride + cols, mask=keep, other=-float("inf"))
    x = tl.exp(x - tl.max(x, axis=0))
    tl.store(dst + row * stride + cols, x / tl.sum(x, axis=0), mask=keep)


def _softmax(x: torch.Tensor) -> torch.Tensor:
    x = x.contiguous()
    out = torch.empty_like(x)
    rows, cols = x.shape
    _lazy_row_softmax[(rows,)](x, out, x.stride(0), cols, BLOCK=triton.next_power_of_2(cols))
    return out


class LazySoftmax(torch.Tensor):
    """Shaped like the result, holding only the input until it is read."""

    @staticmethod
    def __new__(cls, x: torch.Tensor) -> "LazySoftmax":
        made = torch.Tensor._make_subclass(cls, torch.empty(0, dtype=x.dtype, device=x.device))
        made.source = x
        return made

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        args = [_softmax(a.source) if isinstance(a, cls) else a for a in args]
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return LazySoftmax(x)
