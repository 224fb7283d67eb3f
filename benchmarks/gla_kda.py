"""Benchmark of our chunked GLA and KDA against flash-linear-attention, on one CUDA GPU.

Timing as in benchmarks/gdn.py (its ``time_fwd_bwd``: triton.testing.do_bench medians of the
forward, the backward alone and forward+backward; an error of one library in one pass is
recorded, not raised). Inputs in the regime the models use: bf16 q, k (unit norm for KDA,
K^-1/2-scaled for GLA), v and beta; fp32 per-key-channel log decay g from logsigmoid.
fla's chunk_gla / chunk_kda are called with their defaults (fla 0.6.0 on the H200 image, when
importable).

    python3 benchmarks/gla_kda.py --out benchmarks/results/gla-kda-h200.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gdn import apply_sixteen_bit, environment, sixteen_bit_option, time_fwd_bwd

from kernelgate.kernels.gla import chunk_gla
from kernelgate.kernels.kda import chunk_kda


def make_inputs(member: str, batch: int, seq_len: int, heads: int, dim: int) -> list[torch.Tensor]:
    """bf16 q, k, v (and beta for KDA), fp32 per-channel g; all requiring gradients."""
    shape = (batch, seq_len, heads, dim)
    q = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(shape, device="cuda")
    k = (F.normalize(k, dim=-1) if member == "kda" else k * dim**-0.5).bfloat16()
    v = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    g = F.logsigmoid(torch.randn(shape, device="cuda"))
    xs = [q, k, v, g]
    if member == "kda":
        xs.append(torch.rand(shape[:3], device="cuda").bfloat16())
    return [x.requires_grad_() for x in xs]


def contenders(member: str) -> dict[str, object]:
    """Ours and, when it imports, fla's kernel for ``member``, each returning o only."""
    found: dict[str, object] = {}
    if member == "gla":
        found["ours"] = lambda *xs: chunk_gla(*xs)[0]
    else:
        found["ours"] = lambda *xs: chunk_kda(*xs)[0]
    try:
        if member == "gla":
            from fla.ops.gla import chunk_gla as fla_gla

            found["fla"] = lambda *xs: fla_gla(*xs)[0]
        else:
            from fla.ops.kda import chunk_kda as fla_kda

            found["fla"] = lambda *xs: fla_kda(*xs)[0]
    except Exception as exc:
        print(f"fla {member} unavailable: {type(exc).__name__}: {exc}", file=sys.stderr)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/gla-kda-h200.json")
    parser.add_argument("--seq-lens", default="1024,4096,16384")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--dim", type=int, default=128)
    sixteen_bit_option(parser)
    args = parser.parse_args()
    apply_sixteen_bit(args)
    try:
        import fla

        fla_version = fla.__version__
    except Exception:
        fla_version = None
    report = {
        "kernels": ["gla", "kda"],
        **environment(torch.cuda.get_device_name(), fla_version),
        "dtype": "bf16 (q, k, v, beta), fp32 (g, state)",
        "shape": {"B": args.batch, "H": args.heads, "K": args.dim, "V": args.dim},
        "timing": "triton.testing.do_bench median, ms",
        "rows": [],
    }
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    for member in ("gla", "kda"):
        for seq_len in (int(t) for t in args.seq_lens.split(",") if t):
            row: dict[str, object] = {"member": member, "T": seq_len}
            report["rows"].append(row)
            inputs = make_inputs(member, args.batch, seq_len, args.heads, args.dim)
            for name, forward in contenders(member).items():
                started = time.monotonic()
                row[name] = time_fwd_bwd(forward, inputs)
                print(
                    f"{member} T={seq_len} {name}: {row[name]} ({time.monotonic() - started:.1f} s)"
                )
                out_path.write_text(json.dumps(report, indent=1))
            del inputs
            torch.cuda.empty_cache()
    print(f"wrote {out_path}")


if __name__ == "__main__":
    main()
