"""How the gated linear recurrence family computes 16-bit inputs: one setting for gdn,
delta_rule, gla, kda and mamba2.

Every kernel of the family converts what it loads to fp32 and keeps its intermediates (the
WY factors, the chunk states, the decayed scores and every gradient of these) in fp32. What
differs is the precision of the tl.dots, picked by ``dot_precision`` from the dtype the
kernels see:

* ``SIXTEEN_BIT_COMPUTE = "fp32"`` (the default): the public functions convert bf16 and fp16
  inputs to fp32 copies before the kernels (exact: fp32 holds every bf16 and fp16 value), so
  16-bit inputs run the fp32 specializations, whose dots are IEEE fp32 (the ones the fp32
  contracts verified). o is cast back to its input's dtype once, and autograd's casts round
  each gradient once to its input's dtype; the states stay fp32.
* ``"tf32"``: the kernels load the 16-bit inputs themselves and run TF32 dots. Products of
  two inputs are exact there, but every dot operand that is an fp32 intermediate is rounded
  to 10 mantissa bits. On the H200 that left the Gated DeltaNet backward's fp32 gradients
  dg and dh0 60-162x outside the bf16 contract's ensemble bound (115x for dh0); the other
  members' figures, from the interpreter emulation of benchmarks/family_dot_precision.py,
  are in docs/kernels/<member>.md. Kept to measure speed against, not for the contracts.

A module attribute read at every call (not a constant copied into each member), so that
setting ``kernelgate.kernels._precision.SIXTEEN_BIT_COMPUTE`` switches the whole family.
"""

from __future__ import annotations

import torch

SIXTEEN_BIT_COMPUTE = "fp32"
SIXTEEN_BIT = (torch.bfloat16, torch.float16)

# How the fp32 specializations' dots run (16-bit inputs included, as fp32 copies):
# * "ieee": fp32 FMA, exact products: what the fp32 and bf16 contracts were verified with;
# * "tf32x3": Triton's three TF32 tensor-core products (a = hi + lo; hi*hi + hi*lo + lo*hi),
#   about fp32's accuracy: at most 0.26x the ensemble bound on every member in the
#   interpreter emulation (benchmarks/family_dot_precision.py), where TF32 alone was 27-531x.
#   Faster on tensor cores, but it takes more registers: compiled offline for sm_90 with
#   Triton 3.9 and 3.6 (benchmarks/results/family-tf32x3-resources-cpu.json), four kernels
#   spill with it: GDN's _state_bwd_kernel at K = V = 31 (32-44 bytes; 253-255 registers at
#   every K, against 128-220 with IEEE), KDA's _state_bwd_kernel (8 bytes), and on Triton 3.6
#   GLA's _output_fwd_kernel at K = 128 (4 bytes) and Mamba-2's _ssd_chunk_bwd_kernel (8-16
#   bytes). Those stay on IEEE whatever FP32_DOTS says (``IEEE_ONLY``); every other kernel of
#   the family is spill-free with it. To be timed on the device (benchmarks/gdn.py
#   --fp32-dots) before it can become a default.
FP32_DOTS = "ieee"
FP32_DOT_CHOICES = ("ieee", "tf32x3")
IEEE_ONLY = frozenset(
    {
        "gdn._state_bwd_kernel",
        "kda._state_bwd_kernel",
        "gla._output_fwd_kernel",
        "mamba2._ssd_chunk_bwd_kernel",
    }
)


def dot_precision(dtype: torch.dtype, kernel: str | None = None) -> str:
    """The tl.dot precision for inputs of ``dtype`` in ``kernel`` ("member.kernel_name";
    None: any): ``FP32_DOTS`` for fp32 inputs, except IEEE in the kernels of ``IEEE_ONLY``
    (never plain TF32: the fp32 contract must not silently lose 13 mantissa bits of every
    intermediate); TF32 for 16-bit inputs, whose values TF32 represents exactly (reached
    only with ``SIXTEEN_BIT_COMPUTE = "tf32"``: by default 16-bit inputs arrive as fp32
    copies)."""
    if dtype != torch.float32:
        return "tf32"
    if FP32_DOTS not in FP32_DOT_CHOICES:
        raise ValueError(f"FP32_DOTS must be one of {FP32_DOT_CHOICES}, not {FP32_DOTS!r}")
    return "ieee" if kernel in IEEE_ONLY else FP32_DOTS


def compute_inputs(*inputs: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
    """The tensors the kernels compute from: under ``SIXTEEN_BIT_COMPUTE = "fp32"`` each
    16-bit input as an fp32 copy, so its gradient is computed in fp32 and rounded once by
    autograd's cast back; under "tf32" the inputs as they are. fp32 tensors (and None, for
    optional inputs) are returned as they are, so the fp32 path is untouched. The copies are
    autograd ops: the caller's tensors get gradients of their own dtypes."""
    if SIXTEEN_BIT_COMPUTE not in ("fp32", "tf32"):
        raise ValueError(
            f"SIXTEEN_BIT_COMPUTE must be 'fp32' or 'tf32', not {SIXTEEN_BIT_COMPUTE!r}"
        )
    if SIXTEEN_BIT_COMPUTE == "tf32":
        return inputs
    return tuple(x.float() if x is not None and x.dtype in SIXTEEN_BIT else x for x in inputs)
