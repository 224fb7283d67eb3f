"""How the tl.dot precision of the 16-bit path moves the GDN backward's fp32 gradients.

The bf16 contract (examples/gdn_backward/contract_bf16.toml) judges dg and dh0, which are
float32, against an ensemble bound made from honest runs of the reference computed in
float32 (reference_bf16.py casts every input to the float32 state's dtype). The kernels keep
every intermediate in fp32, but for 16-bit inputs ``chunk._dot_precision`` picks "tf32", so
every tl.dot with an fp32 intermediate operand (Tinv, W, U, Vn, the chunk states and their
gradients, the decayed scores, dVn, dW, dTinv...) rounds that operand to 10 mantissa bits.

Without a GPU this runs the real kernels under the Triton interpreter and replaces the
interpreter's ``create_dot`` (an exact fp32 matmul whatever ``input_precision`` says) by one
that models the operand rounding of each precision on the device:

* ``ieee``: exact fp32 products, fp32 accumulation (the interpreter's own behaviour);
* ``tf32``: both operands rounded to tf32 (10 mantissa bits), round to nearest
  (``tf32-trunc``: the low 13 bits dropped, as an MMA that reads raw fp32 registers does);
* ``tf32x3``: Triton's split a = hi + lo (hi, lo tf32), hi*hi + hi*lo + lo*hi;
* ``bf16``: both operands rounded to bf16 (what a kernel that stores or casts intermediates
  to the inputs' dtype before its dots would do), for scale.

It then judges each variant the way CMP-01's ensemble model does, per output: error/bound
with bound = 16 * (worst honest |error| + 2 u_out |ref|), the honest run being the bf16
reference natively (float32 compute) on the CPU. bf16 inputs reach the kernels as bf16 (the
loads convert them to fp32, exactly, before any dot), so this exercises the 16-bit path's
code; it cannot model tensor-core accumulation order.

    PYTHONPATH=src TRITON_INTERPRET=1 python benchmarks/gdn_bwd_dot_precision.py

Since the fix, 16-bit inputs reach the kernels as fp32 copies (``chunk.SIXTEEN_BIT_COMPUTE =
"fp32"``) and every dot is "ieee", so no variant changes anything; ``--compute tf32`` (the
default here) runs the kernels' own 16-bit path, whose dots the variants model.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np
import torch
from triton.runtime import interpreter

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "gdn_backward"
NAMES = ("dq", "dk", "dv", "dg", "dbeta", "dh0")
ENSEMBLE_SAFETY = 16.0  # error_models.SAFETY.ensemble
ROUNDOFF_UNITS = 2.0  # error_models.SAFETY.roundoff_units


def _tf32_nearest(x: np.ndarray) -> np.ndarray:
    """fp32 -> tf32 (10 mantissa bits), round to nearest even; Inf and NaN kept."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    special = (bits & np.uint32(0x7F800000)) == np.uint32(0x7F800000)
    bias = ((bits >> np.uint32(13)) & np.uint32(1)) + np.uint32(0x00000FFF)
    return np.where(special, bits, (bits + bias) & np.uint32(0xFFFFE000)).view(np.float32)


def _tf32_truncate(x: np.ndarray) -> np.ndarray:
    """fp32 -> tf32 by dropping the low 13 mantissa bits."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32)
    return (bits & np.uint32(0xFFFFE000)).view(np.float32)


def _bf16(x: np.ndarray) -> np.ndarray:
    """fp32 -> bf16 -> fp32, round to nearest even (torch's conversion)."""
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    return t.to(torch.bfloat16).to(torch.float32).numpy()


def _mm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.matmul(a, b, dtype=np.float32)


KERNELS = (
    "_wy_fwd_kernel",
    "_wy_apply_fwd_kernel",
    "_state_fwd_kernel",
    "_output_fwd_kernel",
    "_state_bwd_kernel",
    "_dscores_bwd_kernel",
    "_qk_bwd_kernel",
    "_wy_da_bwd_kernel",
    "_wy_dkv_bwd_kernel",
)


def _calling_kernel() -> str | None:
    """The name of the gdn kernel whose (interpreted) body is running, from the stack."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name in KERNELS:
            return frame.f_code.co_name
        frame = frame.f_back
    return None


def make_dot(variant: str, kernels: frozenset[str] | None = None):
    """An interpreter ``create_dot`` that rounds fp32 operands per ``variant`` wherever the
    kernel asked for a precision other than "ieee" (the kernels' fp32 path is untouched);
    with ``kernels``, only in the dots of those kernels (the rest exact)."""

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        x = np.asarray(a.data, dtype=np.float32)
        y = np.asarray(b.data, dtype=np.float32)
        lowered = input_precision is not None and "ieee" not in str(input_precision).lower()
        if lowered and (kernels is None or _calling_kernel() in kernels):
            if variant in ("tf32", "tf32-trunc", "bf16"):
                rnd = {"tf32": _tf32_nearest, "tf32-trunc": _tf32_truncate, "bf16": _bf16}
                x, y = rnd[variant](x), rnd[variant](y)
                out = _mm(x, y)
            elif variant == "tf32x3":
                x_hi, y_hi = _tf32_nearest(x), _tf32_nearest(y)
                x_lo, y_lo = _tf32_nearest(x - x_hi), _tf32_nearest(y - y_hi)
                out = _mm(x_hi, y_lo) + _mm(x_lo, y_hi) + _mm(x_hi, y_hi)
            elif variant == "ieee":
                out = _mm(x, y)
            else:
                raise ValueError(variant)
        else:
            out = _mm(x, y)
        return interpreter.TensorHandle(out + d.data, d.dtype.scalar)

    return create_dot


def _load(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inputs(seed: int, distribution: str, sizes: dict[str, int]) -> list[torch.Tensor]:
    """reference_bf16.get_inputs at ``sizes`` (seeded), reshaped to ``distribution``:
    ``normal`` as given; ``positive-wide`` every input's magnitude (g, beta kept in their
    domains; k scaled into [-1/16, 1/16]), a long one-signed reduction like PRC-02's."""
    ref = _load(EXAMPLE / "reference_bf16.py", "gdn_bwd_reference_bf16")
    for name, value in sizes.items():
        setattr(ref, name, value)
    torch.manual_seed(seed)
    xs = ref.get_inputs()
    if distribution == "positive-wide":
        q, k, v, g, beta, do, h0, dht = xs
        bf = torch.bfloat16
        k = (k.float().abs() * 0.0625 / k.float().abs().max()).to(bf)
        xs = [q.abs(), k, v.abs(), g, beta, do.abs(), h0.abs(), dht.abs()]
    return xs


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--variants", default="ieee,tf32,tf32-trunc,tf32x3,bf16", help="comma-separated"
    )
    parser.add_argument("--distributions", default="normal,positive-wide")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--shape", default="2,70,2,32,32", help="B,T,H,K,V")
    parser.add_argument(
        "--compute",
        default="tf32",
        choices=("tf32", "fp32"),
        help="chunk.SIXTEEN_BIT_COMPUTE: the kernels' 16-bit path (tf32) or fp32 copies",
    )
    parser.add_argument(
        "--per-kernel",
        action="store_true",
        help="each variant in one kernel at a time (the others exact): which dots matter",
    )
    args = parser.parse_args(argv)
    keys = ("batch_size", "seq_len", "num_heads", "head_dim_k", "head_dim_v")
    sizes = dict(zip(keys, (int(s) for s in args.shape.split(",")), strict=True))
    sys.path.insert(0, str(ROOT / "src"))
    from kernelgate.kernels.gdn import chunk

    chunk.SIXTEEN_BIT_COMPUTE = args.compute
    reference = _load(EXAMPLE / "reference_bf16.py", "gdn_bwd_reference_bf16").Model()
    candidate = _load(EXAMPLE / "candidate.py", "gdn_bwd_candidate").ModelNew()
    original = interpreter.InterpreterBuilder.create_dot
    header = "variant     dist          seed " + " ".join(f"{n:>8}" for n in NAMES)
    print("worst error/bound (ensemble model, 16 x (honest cpu-fp32 error + 2u|ref|))")
    print(header)
    try:
        for dist in args.distributions.split(","):
            for seed in (int(s) for s in args.seeds.split(",")):
                xs = inputs(seed, dist, sizes)
                with torch.no_grad():
                    expected = reference(*[x.double() for x in xs])
                    honest = reference(*xs)
                print(
                    f"{'honest':<11} {dist:<13} {seed:>4} "
                    + " ".join(f"{x:8.3g}" for x in judge(expected, honest, honest))
                )
                runs = [(v, None) for v in args.variants.split(",")]
                if args.per_kernel:
                    runs = [(v, kernel) for v in args.variants.split(",") for kernel in KERNELS]
                for variant, kernel in runs:
                    only = None if kernel is None else frozenset([kernel])
                    interpreter.InterpreterBuilder.create_dot = make_dot(variant, only)
                    with torch.no_grad():
                        got = candidate(*xs)
                    ratios = judge(expected, honest, got)
                    print(
                        f"{variant:<11} {dist:<13} {seed:>4} "
                        + " ".join(f"{r:8.3g}" for r in ratios)
                        + ("" if kernel is None else f"  only in {kernel}")
                    )
    finally:
        interpreter.InterpreterBuilder.create_dot = original
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
