"""Zero-padding of odd head widths to 16-byte-aligned rows, shared by the kernel families.

Triton specializes a kernel on what it can prove about its addresses: rows of an odd width
(31 elements, or 1) give scalar loads and more registers, and on sm_90 some of our fp32
kernels then spill (RES-02's offline compile, Triton 3.9: the SSD output kernel 20-24 bytes
at N = 31 and N = 1, the Gated DeltaNet WY kernel 12-20 bytes at K = 31 and K = 1; none at
aligned widths). For the linear recurrences here, zeros appended to a head dimension are
exact: the padded state rows or columns stay zero and reach no output, and are cut off."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def aligned_width(dim: int, *dtypes: torch.dtype) -> int:
    """``dim`` rounded up so that rows of that many elements start 16-byte aligned in every
    one of ``dtypes`` and in fp32 (the state and scratch buffers)."""
    align = max(4, *(16 // torch.empty((), dtype=d).element_size() for d in dtypes))
    return -(-dim // align) * align


def zero_pad(t: torch.Tensor, last: int, second_last: int | None = None) -> torch.Tensor:
    """``t`` with zeros appended to its last (and second-last) dimension up to those sizes;
    ``t`` itself when nothing is to be added."""
    extra_last = last - t.shape[-1]
    extra_second = 0 if second_last is None else second_last - t.shape[-2]
    if extra_last == 0 and extra_second == 0:
        return t
    return F.pad(t, (0, extra_last, 0, extra_second))
