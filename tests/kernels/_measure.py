"""How the kernel tests measure error against a float64 oracle (shared by every member)."""

from __future__ import annotations

import math

import torch

# TF32 allowance: 16-bit inputs run TF32 dots, whose fp32 operands (scores, states, decayed
# keys) are rounded to 10 mantissa bits (2^-11 each; two such roundings).
TF32_ALLOWANCE = 2**-10


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    """max |x - ref| / max |ref|, in float64."""
    ref = ref.double()
    return ((x.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-300)).item()


def rounding_bound(
    x: torch.Tensor, ref: torch.Tensor, fp32_outputs_as: torch.dtype | None = None
) -> float:
    """Relative error (to max|ref|) of rounding the largest element to x's dtype: half an ulp
    of max|ref|, between 2^-9 and 2^-8 for bf16 depending on where max|ref| sits in its binade
    (a fixed 3.3e-3 would fail whenever it sits in the lowest fifth), plus TF32_ALLOWANCE.

    ``fp32_outputs_as``: the dtype an fp32 output (a final state, dh0) is held to instead of
    its own, for a member whose state passes through many steps of 16-bit-run arithmetic
    (test_kda says why)."""
    peak = ref.double().abs().max().item()
    dtype = fp32_outputs_as if fp32_outputs_as and x.dtype == torch.float32 else x.dtype
    half_ulp = 2.0 ** math.floor(math.log2(peak)) * torch.finfo(dtype).eps / 2
    return half_ulp / peak + TF32_ALLOWANCE
