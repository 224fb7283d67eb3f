"""How the tl.dot precision of the 16-bit path moves each family member's bf16 results.

For bf16 inputs the kernels of gdn, delta_rule, gla, kda and mamba2 keep every intermediate
in fp32; with ``_precision.SIXTEEN_BIT_COMPUTE = "tf32"`` (their own 16-bit path) every tl.dot
whose operand is an fp32 intermediate (WY factors, chunk states, decayed scores and every
gradient of these) rounds it to 10 mantissa bits. On the H200 that put the Gated DeltaNet
backward's fp32 gradients 60-162x outside the bf16 contract's bound. This measures the same
for every member, forward and backward, without a GPU:

It runs the real kernels under the Triton interpreter, whose ``create_dot`` is an exact fp32
matmul whatever ``input_precision`` says, with ``create_dot`` replaced by one that models the
operand rounding of each precision on the device (``make_dot``):

* ``ieee``: exact fp32 products, fp32 accumulation (the interpreter's own behaviour);
* ``tf32``: both operands rounded to tf32 (10 mantissa bits), round to nearest
  (``tf32-trunc``: the low 13 bits dropped, as an MMA that reads raw fp32 registers does);
* ``tf32x3``: Triton's split a = hi + lo (hi, lo tf32), hi*hi + hi*lo + lo*hi;
* ``bf16``: both operands rounded to bf16, for scale.

Each run is one forward and backward: o and the final state, then the gradients of
<o, do> + <S_T, dht> for every input and the initial state. Each output is judged the way
CMP-01's ensemble model does: error/bound with bound = 16 * (worst honest |error| +
2 u_out |ref|), the oracle being the member's recurrence (kernels/<member>/naive.py) in
float64 on the same values, the honest run the same recurrence computed in float32 (as the
bf16 backward contract's reference does: 16-bit inputs upcast to the fp32 state's dtype),
its outputs in the kernels' dtypes (o in v's, each gradient in its input's, states fp32).
A ratio above 1 would fail the judge. Rows:

* ``copies``: the default policy (16-bit inputs as fp32 copies, every dot "ieee"), exact
  dots; no variant can change it.
* the variants: the kernels' own 16-bit path (``SIXTEEN_BIT_COMPUTE = "tf32"``), dots
  modelled as named. The interpreter stores fp32 to bf16 by truncation (the device rounds to
  nearest), which inflates the bf16 outputs' ratios of these rows a little; the ``ieee`` row
  shows that floor. The fp32 outputs (state, dh0, dg of an fp32 g, mamba2's ddt, dA, dD) are
  the telling ones. It cannot model tensor-core accumulation order.

The honest run's error, and so every ratio, differs between processes by up to about 1.5x
(torch's CPU reductions depend on memory alignment; the same process repeats itself exactly),
so two runs of this script agree on the verdicts, not on the third digit.

    PYTHONPATH=src TRITON_INTERPRET=1 python benchmarks/family_dot_precision.py \\
        --members gdn,delta_rule,gla,kda,mamba2 --out benchmarks/results/x.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np
import torch
import torch.nn.functional as F
import triton
from triton.runtime import interpreter

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kernelgate.kernels import _precision  # noqa: E402
from kernelgate.kernels.delta_rule import chunk_delta_rule, naive_recurrent_delta_rule  # noqa: E402
from kernelgate.kernels.gdn import (  # noqa: E402
    chunk_gated_delta_rule,
    naive_recurrent_gated_delta_rule,
)
from kernelgate.kernels.gla import chunk_gla, naive_recurrent_gla  # noqa: E402
from kernelgate.kernels.kda import chunk_kda, naive_recurrent_kda  # noqa: E402
from kernelgate.kernels.mamba2 import chunk_ssd, naive_recurrent_ssd  # noqa: E402

ENSEMBLE_SAFETY = 16.0  # error_models.SAFETY.ensemble
ROUNDOFF_UNITS = 2.0  # error_models.SAFETY.roundoff_units
VARIANTS = ("ieee", "tf32", "tf32-trunc", "tf32x3", "bf16")


# ------------------------------------------------------------------ the device's dot, modelled


def tf32_nearest(x: np.ndarray) -> np.ndarray:
    """fp32 -> tf32 (10 mantissa bits), round to nearest even; Inf and NaN kept."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    bias = ((bits >> np.uint32(13)) & np.uint32(1)) + np.uint32(0x00000FFF)
    return np.where(special, bits, (bits + bias) & np.uint32(0xFFFFE000)).view(np.float32)


def tf32_truncate(x: np.ndarray) -> np.ndarray:
    """fp32 -> tf32 by dropping the low 13 mantissa bits."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    return (bits & np.uint32(0xFFFFE000)).view(np.float32)


def bf16_round(x: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 -> fp32, round to nearest even (torch's conversion)."""
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    return t.to(torch.bfloat16).to(torch.float32).numpy()


def _mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.matmul(a, b, dtype=np.float32)


def _calling_kernel(kernels: frozenset[str]) -> str | None:
    """The name of the kernel in ``kernels`` whose (interpreted) body is running."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name in kernels:
            return frame.f_code.co_name
        frame = frame.f_back
    return None


def make_dot(variant: str, kernels: frozenset[str] | None = None) -> Callable:
    """An interpreter ``create_dot`` that rounds fp32 operands per ``variant`` wherever the
    kernel asked for a precision other than "ieee" (the kernels' fp32 path is untouched);
    with ``kernels``, only in the dots of those kernels (the rest exact)."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; one of {VARIANTS}")

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        x = np.asarray(a.data, dtype=np.float32)
        y = np.asarray(b.data, dtype=np.float32)
        lowered = input_precision is not None and "ieee" not in str(input_precision).lower()
        if lowered and (kernels is None or _calling_kernel(kernels) is not None):
            if variant in ("tf32", "tf32-trunc", "bf16"):
                rnd = {"tf32": tf32_nearest, "tf32-trunc": tf32_truncate, "bf16": bf16_round}
                out = _mm(rnd[variant](x), rnd[variant](y))
            elif variant == "tf32x3":
                x_hi, y_hi = tf32_nearest(x), tf32_nearest(y)
                x_lo, y_lo = tf32_nearest(x - x_hi), tf32_nearest(y - y_hi)
                out = _mm(x_hi, y_lo) + _mm(x_lo, y_hi) + _mm(x_hi, y_hi)
            else:
                out = _mm(x, y)
        else:
            out = _mm(x, y)
        return interpreter.TensorHandle(out + d.data, d.dtype.scalar)

    return create_dot


def judge(
    expected: list[torch.Tensor], honest: list[torch.Tensor], got: list[torch.Tensor]
) -> list[float]:
    """Per output, the worst error/bound of the ensemble model (one honest run)."""
    ratios = []
    for ref, run, out in zip(expected, honest, got, strict=True):
        ref = ref.double()
        u = float(torch.finfo(out.dtype).eps) / 2
        noise = float((run.double() - ref).abs().max())
        bound = ENSEMBLE_SAFETY * (noise + ROUNDOFF_UNITS * u * ref.abs())
        ratios.append(float(((out.double() - ref).abs() / bound).max()))
    return ratios


# ------------------------------------------------------------------------------ the members


@dataclass(frozen=True)
class Member:
    """One member: its inputs' names (the initial state last), how to make them, its chunked
    function and its recurrence (both called with initial_state and output_final_state)."""

    names: tuple[str, ...]
    make: Callable[[torch.Generator, tuple[int, ...]], list[torch.Tensor]]
    kernel: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    recurrence: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    one_signed: tuple[str, ...]  # inputs made nonnegative by the "one-signed" distribution


BF = torch.bfloat16


def _qkv(gen: torch.Generator, b: int, t: int, h: int, k: int, v: int, normal_keys: bool):
    q = torch.randn(b, t, h, k, generator=gen)
    keys = torch.randn(b, t, h, k, generator=gen)
    keys = F.normalize(keys, dim=-1) if normal_keys else keys * k**-0.5
    return q.to(BF), keys.to(BF), torch.randn(b, t, h, v, generator=gen).to(BF)


def _make_gdn(gen, shape):
    b, t, h, k, v = shape
    q, keys, values = _qkv(gen, b, t, h, k, v, True)
    g = F.logsigmoid(torch.randn(b, t, h, generator=gen))
    beta = torch.rand(b, t, h, generator=gen).to(BF)
    return [q, keys, values, g, beta, torch.randn(b, h, k, v, generator=gen)]


def _make_delta_rule(gen, shape):
    b, t, h, k, v = shape
    q, keys, values = _qkv(gen, b, t, h, k, v, True)
    beta = torch.rand(b, t, h, generator=gen).to(BF)
    return [q, keys, values, beta, torch.randn(b, h, k, v, generator=gen)]


def _make_gla(gen, shape):
    b, t, h, k, v = shape
    q, keys, values = _qkv(gen, b, t, h, k, v, False)
    g = F.logsigmoid(torch.randn(b, t, h, k, generator=gen))
    return [q, keys, values, g, torch.randn(b, h, k, v, generator=gen)]


def _make_kda(gen, shape):
    b, t, h, k, v = shape
    q, keys, values = _qkv(gen, b, t, h, k, v, True)
    g = F.logsigmoid(torch.randn(b, t, h, k, generator=gen))
    beta = torch.rand(b, t, h, generator=gen).to(BF)
    return [q, keys, values, g, beta, torch.randn(b, h, k, v, generator=gen)]


def _make_mamba2(gen, shape):
    """bf16 x, B, C and fp32 dt, A, D as Mamba-2 calls it (benchmarks/family.py); one group,
    N = K, P = V; Mamba-2's initial ranges for dt and A."""
    b, t, h, n, p = shape
    x = torch.randn(b, t, h, p, generator=gen).to(BF)
    dt = torch.empty(b, t, h).uniform_(np.log(1e-3), np.log(0.1), generator=gen).exp()
    a = -torch.empty(h).uniform_(1.0, 16.0, generator=gen)
    bc = [(torch.randn(b, t, 1, n, generator=gen) * n**-0.5).to(BF) for _ in range(2)]
    d = torch.randn(h, generator=gen)
    return [x, dt, a, *bc, d, torch.randn(b, h, n, p, generator=gen)]


def _final(fn: Callable, count: int) -> Callable:
    """``fn`` called as fn(*inputs[:count], initial_state=inputs[count], final state on)."""

    def call(*xs, **kw):
        return fn(*xs[:count], initial_state=xs[count], output_final_state=True, **kw)

    return call


MEMBERS = {
    "gdn": Member(
        ("q", "k", "v", "g", "beta", "h0"),
        _make_gdn,
        _final(chunk_gated_delta_rule, 5),
        _final(naive_recurrent_gated_delta_rule, 5),
        ("q", "k", "v", "h0"),
    ),
    "delta_rule": Member(
        ("q", "k", "v", "beta", "h0"),
        _make_delta_rule,
        _final(chunk_delta_rule, 4),
        _final(naive_recurrent_delta_rule, 4),
        ("q", "k", "v", "h0"),
    ),
    "gla": Member(
        ("q", "k", "v", "g", "h0"),
        _make_gla,
        _final(chunk_gla, 4),
        _final(naive_recurrent_gla, 4),
        ("q", "k", "v", "h0"),
    ),
    "kda": Member(
        ("q", "k", "v", "g", "beta", "h0"),
        _make_kda,
        _final(chunk_kda, 5),
        _final(naive_recurrent_kda, 5),
        ("q", "k", "v", "h0"),
    ),
    "mamba2": Member(
        ("x", "dt", "A", "B", "C", "D", "h0"),
        _make_mamba2,
        _final(chunk_ssd, 6),
        _final(naive_recurrent_ssd, 6),
        ("x", "B", "C", "h0"),
    ),
}


def member_inputs(
    member: Member, shape: tuple[int, ...], seed: int, distribution: str
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """(inputs, cotangents [do, dht]) at ``shape`` = (B, T, H, K, V); ``one-signed`` takes
    the magnitudes of q, k, v (x, B, C), the initial state and the cotangents (gates kept in
    their domains): long one-signed reductions, where no cancellation hides a bias."""
    gen = torch.Generator().manual_seed(seed)
    xs = member.make(gen, shape)
    state = xs[-1]
    out_shape = (*shape[:3], shape[4])
    cot = [torch.randn(out_shape, generator=gen).to(xs[0].dtype), torch.randn(state.shape)]
    if distribution == "one-signed":
        xs = [x.abs() if n in member.one_signed else x for n, x in zip(member.names, xs)]
        cot = [c.abs() for c in cot]
    elif distribution != "normal":
        raise ValueError(f"unknown distribution {distribution!r}")
    return xs, cot


def run(
    fn: Callable, xs: list[torch.Tensor], cot: list[torch.Tensor], out_dtype: torch.dtype, **kw
) -> list[torch.Tensor]:
    """o (in ``out_dtype``), the final state and the gradient of <o, do> + <S_T, dht> for
    every input, from one forward and backward of ``fn``."""
    leaves = [x.detach().clone().requires_grad_() for x in xs]
    with torch.enable_grad():
        o, ht = fn(*leaves, **kw)
        grads = torch.autograd.grad((o, ht), leaves, (cot[0].to(o.dtype), cot[1].to(ht.dtype)))
    return [o.detach().to(out_dtype), ht.detach(), *grads]


def measure(
    name: str, shape: tuple[int, ...], seed: int, distribution: str, variants: list[str]
) -> dict[str, list[float]]:
    """{row: [error/bound per output]} for the honest run, the fp32 copies and each variant
    of the 16-bit path."""
    member = MEMBERS[name]
    xs, cot = member_inputs(member, shape, seed, distribution)
    out_dtype = xs[0].dtype  # o has v's (x's) dtype, the first input's here
    exact = run(member.recurrence, [x.double() for x in xs], cot, torch.float64)
    honest = run(member.recurrence, xs, cot, out_dtype, compute_dtype=torch.float32)
    rows = {"honest": judge(exact, honest, honest)}
    original_dot = interpreter.InterpreterBuilder.create_dot
    original_compute = _precision.SIXTEEN_BIT_COMPUTE
    try:
        _precision.SIXTEEN_BIT_COMPUTE = "fp32"
        rows["copies"] = judge(exact, honest, run(member.kernel, xs, cot, out_dtype))
        _precision.SIXTEEN_BIT_COMPUTE = "tf32"
        for variant in variants:
            interpreter.InterpreterBuilder.create_dot = make_dot(variant)
            rows[variant] = judge(exact, honest, run(member.kernel, xs, cot, out_dtype))
    finally:
        interpreter.InterpreterBuilder.create_dot = original_dot
        _precision.SIXTEEN_BIT_COMPUTE = original_compute
    return rows


def output_names(name: str) -> list[str]:
    return ["o", "ht", *("d" + n for n in MEMBERS[name].names)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", default=",".join(MEMBERS))
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated")
    parser.add_argument("--distributions", default="normal,one-signed")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--shape", default="2,70,2,32,32", help="B,T,H,K,V (mamba2: N=K, P=V)")
    parser.add_argument("--out", type=Path, help="write the table as JSON here")
    args = parser.parse_args(argv)
    shape = tuple(int(s) for s in args.shape.split(","))
    variants = args.variants.split(",")
    results: dict[str, object] = {}
    print("worst error/bound (ensemble model: 16 x (honest fp32-compute error + 2u|ref|))")
    for name in args.members.split(","):
        started = time.perf_counter()
        names = output_names(name)
        print(f"\n{name}\n{'row':<11} {'dist':<11} seed " + " ".join(f"{n:>7}" for n in names))
        cases = []
        for dist in args.distributions.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                rows = measure(name, shape, seed, dist, variants)
                for row, ratios in rows.items():
                    print(
                        f"{row:<11} {dist:<11} {seed:>4} " + " ".join(f"{r:7.3g}" for r in ratios)
                    )
                cases.append({"distribution": dist, "seed": seed, "rows": rows})
        worst = {
            row: dict(zip(names, np.max([c["rows"][row] for c in cases], axis=0).tolist()))
            for row in cases[0]["rows"]
        }
        seconds = round(time.perf_counter() - started, 1)
        print(f"{name}: worst over cases {json.dumps(worst)} ({seconds} s)")
        results[name] = {"outputs": names, "worst": worst, "cases": cases, "seconds": seconds}
    if args.out:
        record = {
            "benchmark": "benchmarks/family_dot_precision.py",
            "command": " ".join(["python", "benchmarks/family_dot_precision.py", *sys.argv[1:]]),
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "torch": torch.__version__,
            "triton": triton.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
            "device": "cpu (Triton interpreter, dots modelled by make_dot)",
            "shape_B_T_H_K_V": shape,
            "judge": "error/bound, bound = 16 * (worst honest |error| + 2 u_out |ref|); > 1 fails",
            "honest": "the recurrence (naive.py) in float32, outputs in the kernels' dtypes",
            "oracle": "the same recurrence in float64 on the same (bf16-rounded) values",
            "members": results,
        }
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
