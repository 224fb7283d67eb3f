"""How the tl.dot precision of the 16-bit path moves the GDN backward's fp32 gradients.

The bf16 contract (examples/gdn_backward/contract_bf16.toml) judges dg and dh0, which are
float32, against an ensemble bound made from honest runs of the reference computed in
float32 (reference_bf16.py casts every input to the float32 state's dtype). The kernels keep
every intermediate in fp32, but for 16-bit inputs ``_precision.dot_precision`` picks "tf32", so
every tl.dot with an fp32 intermediate operand (Tinv, W, U, Vn, the chunk states and their
gradients, the decayed scores, dVn, dW, dTinv...) rounds that operand to 10 mantissa bits.

Without a GPU this runs the real kernels under the Triton interpreter and replaces the
interpreter's ``create_dot`` (an exact fp32 matmul whatever ``input_precision`` says) by one
that models the operand rounding of each precision on the device (``make_dot``, shared with
benchmarks/family_dot_precision.py, which measures every member of the family):

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

Since the fix, 16-bit inputs reach the kernels as fp32 copies (``_precision.SIXTEEN_BIT_COMPUTE =
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

import torch
from triton.runtime import interpreter

sys.path.insert(0, str(Path(__file__).resolve().parent))
from family_dot_precision import judge, make_dot

from kernelgate.kernels import _precision

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "gdn_backward"
NAMES = ("dq", "dk", "dv", "dg", "dbeta", "dh0")


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
        help="_precision.SIXTEEN_BIT_COMPUTE: the kernels' 16-bit path (tf32) or fp32 copies",
    )
    parser.add_argument(
        "--per-kernel",
        action="store_true",
        help="each variant in one kernel at a time (the others exact): which dots matter",
    )
    args = parser.parse_args(argv)
    keys = ("batch_size", "seq_len", "num_heads", "head_dim_k", "head_dim_v")
    sizes = dict(zip(keys, (int(s) for s in args.shape.split(",")), strict=True))
    _precision.SIXTEEN_BIT_COMPUTE = args.compute
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
