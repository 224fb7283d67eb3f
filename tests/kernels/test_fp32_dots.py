"""``kernels._precision.FP32_DOTS``: one setting for how every member's fp32 dots run.

Whether "tf32x3" is fast enough and spill-free is for the device (benchmarks/gdn.py
``--fp32-dots``); here: the setting reaches every member's kernels, and the interpreter,
whose dots are exact fp32 whatever the precision, gives bitwise the IEEE results with it.
"""

from __future__ import annotations

import os

import pytest
import torch

from kernelgate.kernels import _precision
from kernelgate.kernels.delta_rule import chunk_delta_rule
from kernelgate.kernels.gdn import chunk_gated_delta_rule
from kernelgate.kernels.gla import chunk_gla
from kernelgate.kernels.kda import chunk_kda
from kernelgate.kernels.mamba2 import chunk_ssd

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
B, T, H, K, V = 1, 70, 2, 16, 16


def _members() -> dict[str, tuple]:
    """Each member's call on small fp32 inputs (one T not a multiple of the chunk)."""
    gen = torch.Generator().manual_seed(0)

    def randn(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=gen) * scale).requires_grad_()

    q, k, v = randn(B, T, H, K), randn(B, T, H, K, scale=0.3), randn(B, T, H, V)
    g_head = (-torch.rand(B, T, H, generator=gen) * 0.1).requires_grad_()
    g_key = (-torch.rand(B, T, H, K, generator=gen) * 0.1).requires_grad_()
    beta = torch.rand(B, T, H, generator=gen).requires_grad_()
    x, dt = randn(B, T, H, V), (torch.rand(B, T, H, generator=gen) * 0.1).requires_grad_()
    a = (-torch.rand(H, generator=gen)).requires_grad_()
    bb, cc = randn(B, T, 1, K), randn(B, T, 1, K)
    return {
        "gdn": (chunk_gated_delta_rule, (q, k, v, g_head, beta)),
        "delta_rule": (chunk_delta_rule, (q, k, v, beta)),
        "gla": (chunk_gla, (q, k, v, g_key)),
        "kda": (chunk_kda, (q, k, v, g_key, beta)),
        "mamba2": (chunk_ssd, (x, dt, a, bb, cc)),
    }


def _run(fn, args: tuple) -> list[torch.Tensor]:
    for t in args:
        t.grad = None
    out, _ = fn(*args)
    out.square().sum().backward()
    return [out.detach().clone(), *(t.grad.clone() for t in args)]


def test_fp32_dots_is_read_at_every_call_and_refuses_unknown_values(monkeypatch) -> None:
    assert _precision.dot_precision(torch.float32) == _precision.FP32_DOTS == "ieee"
    monkeypatch.setattr(_precision, "FP32_DOTS", "tf32x3")
    assert _precision.dot_precision(torch.float32) == "tf32x3"
    assert _precision.dot_precision(torch.bfloat16) == "tf32"  # the 16-bit path's own
    monkeypatch.setattr(_precision, "FP32_DOTS", "tf32")  # plain TF32: never for fp32
    with pytest.raises(ValueError, match="FP32_DOTS must be one of"):
        _precision.dot_precision(torch.float32)


@pytest.mark.skipif(not INTERPRETED, reason="the interpreter's dots are exact fp32")
@pytest.mark.parametrize("member", ["gdn", "delta_rule", "gla", "kda", "mamba2"])
def test_tf32x3_reaches_every_members_kernels(member: str, monkeypatch) -> None:
    fn, args = _members()[member]
    ieee = _run(fn, args)
    monkeypatch.setattr(_precision, "FP32_DOTS", "tf32x3")
    tf32x3 = _run(fn, args)
    for a, b in zip(ieee, tf32x3, strict=True):
        assert torch.equal(a, b)
    monkeypatch.setattr(_precision, "FP32_DOTS", "unknown")
    with pytest.raises(ValueError, match="FP32_DOTS"):
        _run(fn, args)


@pytest.mark.skipif(not INTERPRETED, reason="launches are recorded under the interpreter")
@pytest.mark.parametrize("member", ["gdn", "delta_rule", "gla", "kda", "mamba2"])
def test_the_kernels_that_spill_with_tf32x3_keep_ieee(member: str, monkeypatch) -> None:
    """Compiled offline for sm_90 (benchmarks/results/family-tf32x3-resources-cpu.json), four
    kernels of the family spill with three-product dots: they stay on IEEE while every other
    kernel with dots takes FP32_DOTS."""
    from triton.runtime.interpreter import InterpretedFunction

    from kernelgate.sandbox.resources import LaunchRecorder

    monkeypatch.setattr(_precision, "FP32_DOTS", "tf32x3")
    fn, args = _members()[member]
    recorder, original = LaunchRecorder(), InterpretedFunction.run
    recorder.install(interpreter=True)
    try:
        _run(fn, args)
    finally:
        InterpretedFunction.run = original
    records = recorder.drain()
    precisions = {r["name"]: r["constexprs"]["PREC"] for r in records if "PREC" in r["constexprs"]}
    owner = "gdn" if member == "delta_rule" else member  # delta_rule runs gdn's kernels
    kept = {name for name in precisions if f"{owner}.{name}" in _precision.IEEE_ONLY}
    assert {precisions[name] for name in kept} <= {"ieee"}
    assert precisions.keys() - kept and {precisions[n] for n in precisions.keys() - kept} == {
        "tf32x3"
    }
    if member != "delta_rule":  # every kernel named for this member was launched here
        named = {k.split(".", 1)[1] for k in _precision.IEEE_ONLY if k.startswith(f"{owner}.")}
        assert named <= kept, named - kept
