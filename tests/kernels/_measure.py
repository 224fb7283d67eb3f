"""How the kernel tests measure error against a float64 oracle (shared by every member)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch

# TF32 allowance: the kernels' own 16-bit path runs TF32 dots, whose fp32 operands (scores,
# states, decayed keys) are rounded to 10 mantissa bits (2^-11 each; two such roundings). By
# default 16-bit inputs run as fp32 copies (kernels/_precision.py) and need none of it; the
# GPU tests keep it so that they hold under either SIXTEEN_BIT_COMPUTE, measured as they were.
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


def cotangents(
    o_shape: Sequence[int], state_shape: Sequence[int], dtype: torch.dtype, seed: int, device
) -> tuple[torch.Tensor, torch.Tensor]:
    """do (in o's ``dtype``) and dht (fp32, as the state) for a forward and backward."""
    gen = torch.Generator(device=device).manual_seed(seed)
    do = torch.randn(tuple(o_shape), generator=gen, device=device).to(dtype)
    return do, torch.randn(tuple(state_shape), generator=gen, device=device)


def outputs_and_grads(
    fn: Callable, inputs: Sequence[torch.Tensor], do: torch.Tensor, dht: torch.Tensor
) -> list[torch.Tensor]:
    """[o, S_T, the gradient of <o, do> + <S_T, dht> for every input], from one forward and
    backward of ``fn(*inputs[:-1], initial_state=inputs[-1], output_final_state=True)`` (the
    calling convention of every member, chunked and naive); do and dht are cast to o's and
    S_T's dtypes (an fp32 honest run of a bf16 model takes the same values)."""
    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    o, ht = fn(*leaves[:-1], initial_state=leaves[-1], output_final_state=True)
    grads = torch.autograd.grad((o, ht), leaves, (do.to(o.dtype), dht.to(ht.dtype)))
    return [o.detach(), ht.detach(), *grads]


def ensemble_ratio(out: torch.Tensor, ref: torch.Tensor, honest: torch.Tensor) -> float:
    """Worst |out - ref| / bound of CMP-01's ensemble model for one output, bound = 16 x (the
    honest run's worst |error| + 2 u |ref|), u the unit roundoff of out's dtype: above 1,
    the judge rejects."""
    ref = ref.double()
    unit = torch.finfo(out.dtype).eps / 2
    noise = (honest.double() - ref).abs().max().item()
    bound = 16 * (noise + 2 * unit * ref.abs())
    return ((out.double() - ref).abs() / bound).max().item()


def tf32_create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
    """The Triton interpreter's ``create_dot`` with the device's TF32 operand rounding (10
    mantissa bits, to nearest even) wherever a kernel asks for a precision other than "ieee";
    the interpreter itself computes every dot exactly, whatever the precision (the full model,
    with its other variants, is benchmarks/family_dot_precision.py's make_dot)."""
    from triton.runtime.interpreter import TensorHandle

    def tf32(x: np.ndarray) -> np.ndarray:
        bits = np.asarray(x, dtype=np.float32).view(np.uint32)
        bias = ((bits >> np.uint32(13)) & np.uint32(1)) + np.uint32(0x00000FFF)
        return ((bits + bias) & np.uint32(0xFFFFE000)).view(np.float32)

    x, y = np.asarray(a.data, dtype=np.float32), np.asarray(b.data, dtype=np.float32)
    if "ieee" not in str(input_precision).lower():
        x, y = tf32(x), tf32(y)
    return TensorHandle(np.matmul(x, y, dtype=np.float32) + d.data, d.dtype.scalar)


def assert_16bit_is_the_fp32_path_rounded_once(
    fn: Callable, inputs: Sequence[torch.Tensor], do: torch.Tensor, dht: torch.Tensor
) -> None:
    """The family's 16-bit policy (kernels/_precision.py, SIXTEEN_BIT_COMPUTE = "fp32"): 16-bit
    inputs give exactly what the fp32 path gives on their fp32 copies, o rounded once to its
    dtype (do's here), each gradient to its input's, the state and fp32 gradients bit for bit."""
    got = outputs_and_grads(fn, inputs, do, dht)
    ref = outputs_and_grads(fn, [x.float() for x in inputs], do.float(), dht)
    dtypes = [do.dtype, torch.float32, *(x.dtype for x in inputs)]
    assert any(d != torch.float32 for d in dtypes)
    for index, (ours, fp32, dtype) in enumerate(zip(got, ref, dtypes, strict=True)):
        assert fp32.dtype == torch.float32 and ours.dtype == dtype, (index, ours.dtype, dtype)
        assert torch.equal(ours, fp32.to(dtype)), index


def emulated_tf32_ratios(
    fn: Callable,
    recurrence: Callable,
    inputs: Sequence[torch.Tensor],
    do: torch.Tensor,
    dht: torch.Tensor,
    monkeypatch,
) -> list[tuple[float, float]]:
    """Per output of ``outputs_and_grads``, (copies, tf32): the ensemble_ratio of the default
    fp32 copies and of the kernels' own 16-bit path with the device's TF32 dots modelled
    (tf32_create_dot), against the float64 ``recurrence`` with the honest run being the same
    recurrence computed in float32 (its o in o's dtype), as benchmarks/family_dot_precision.py
    measures. Leaves ``monkeypatch`` holding the tf32 settings until the test ends."""
    from triton.runtime import interpreter

    from kernelgate.kernels import _precision

    exact = outputs_and_grads(recurrence, [x.double() for x in inputs], do.double(), dht)

    def fp32_recurrence(*args, **kwargs):
        return recurrence(*args, **kwargs, compute_dtype=torch.float32)

    honest = outputs_and_grads(fp32_recurrence, inputs, do, dht)
    honest[0] = honest[0].to(do.dtype)
    copies = outputs_and_grads(fn, inputs, do, dht)
    monkeypatch.setattr(_precision, "SIXTEEN_BIT_COMPUTE", "tf32")
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", tf32_create_dot)
    tf32 = outputs_and_grads(fn, inputs, do, dht)
    return [
        (ensemble_ratio(c, e, h), ensemble_ratio(t, e, h))
        for c, t, e, h in zip(copies, tf32, exact, honest, strict=True)
    ]


# What the family's fp32 outputs (final state, dh0, the gradients of fp32 gates) reach under
# the emulated TF32 dots of the kernels' own 16-bit path, at least, in the tests' cases (the
# judge rejects above 1): measured 33-185x there (B=1, T=70, H=2, K=V=32, seed 0), against
# at most 0.13x for the fp32 copies. benchmarks/family_dot_precision.py, over two seeds and
# two distributions: 27-531x for gdn, delta_rule, GLA and KDA; Mamba-2's are lower (S_T
# 5.5-9.3x, d dt 4.0-101x, dA 0.28-64x: inside the bound in one one-signed case). The honest
# CPU run's error, and so each ratio, varies by up to ~1.5x between processes.
TF32_FLOOR = 5.0
