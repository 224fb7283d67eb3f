"""Benchmark of our chunked Gated DeltaNet against flash-linear-attention, the naive
recurrence and a roofline, on one CUDA GPU.

Timing: triton.testing.do_bench, median. "fwd" runs the forward only; "bwd" runs only the
backward of an already built graph (retain_graph=True, gradients reset to None between runs
by do_bench); "fwd+bwd" runs both. Inputs in the regime Gated DeltaNet is used in: bf16 q, k
(unit norm), v and beta, fp32 log-decay g from logsigmoid.

Roofline: time = max(bytes / 4.8 TB/s, FLOPs / 790 TFLOP/s) (H200 HBM bandwidth and dense
bf16 tensor-core peak), where bytes are only the compulsory ones (each input read once, each
output written once, no intermediates) and FLOPs are the tensor-core work of the chunked
algorithm with chunk size C = 64, per token and head (see ``roofline`` below). It is an
optimistic bound: our fp32 dots run as TF32 (half the bf16 rate) and the triangular inverse
is scalar work.

    python3 benchmarks/gdn.py --out benchmarks/results/gdn-h200.json

``--forward registers`` times the opt-in register-resident forward (kernels/gdn/
chunk_fwd_fast.py) instead of the shipped one; the report's ``gdn_forward`` says which ran.
``--backward registers`` likewise times the opt-in register-resident backward (kernels/gdn/
chunk_bwd_fast.py after the shipped reverse scan); the report's ``gdn_backward`` says which.
"""

from __future__ import annotations

import argparse
import datetime
import faulthandler
import json
import math
import platform
import sys
import time
import traceback
from pathlib import Path

import torch
import torch.nn.functional as F
import triton
from triton.testing import do_bench

try:
    import kernelgate  # noqa: F401
except ImportError:  # run from a checkout without installing it: python3 benchmarks/gdn.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from kernelgate.kernels import _precision
from kernelgate.kernels.gdn import chunk as gdn_chunk
from kernelgate.kernels.gdn import chunk_gated_delta_rule, naive_recurrent_gated_delta_rule

HBM_BYTES_PER_S = 4.8e12
BF16_FLOPS_PER_S = 790e12
CHUNK = 64
FLA_VERSION = "0.6.0"  # the version the issue compares against


def roofline(batch: int, seq_len: int, heads: int, dim_k: int, dim_v: int) -> dict[str, float]:
    """Compulsory bytes and chunked-algorithm FLOPs, and the roofline times in ms.

    Per token and head (C = 64): forward = W/U (2CK + 2CV), K K^T (2CK), inverse (C^2/3),
    state scan (w h and k^T vn: 4KV), output (q h: 2KV, q k^T: 2CK, scores vn: 2CV), i.e.
    6KV + 6CK + 4CV + C^2/3. Backward (our kernels): 12KV + 18CK + 8CV + 4C^2.
    Bytes: forward reads q, k, v, beta (bf16), g (fp32) and writes o (bf16); backward reads
    the same inputs and dO and writes dq, dk, dv, dbeta (bf16) and dg (fp32).
    """
    tokens = batch * seq_len * heads
    c = CHUNK
    fwd_flops = tokens * (6 * dim_k * dim_v + 6 * c * dim_k + 4 * c * dim_v + c * c / 3)
    bwd_flops = tokens * (12 * dim_k * dim_v + 18 * c * dim_k + 8 * c * dim_v + 4 * c * c)
    inputs = tokens * (2 * dim_k * 2 + dim_v * 2 + 2 + 4)
    fwd_bytes = inputs + tokens * dim_v * 2
    bwd_bytes = inputs + tokens * dim_v * 2 + tokens * (2 * dim_k * 2 + dim_v * 2 + 2 + 4)

    def ms(flops: float, nbytes: float) -> float:
        return 1e3 * max(flops / BF16_FLOPS_PER_S, nbytes / HBM_BYTES_PER_S)

    return {
        "fwd_flops": fwd_flops,
        "bwd_flops": bwd_flops,
        "fwd_bytes": fwd_bytes,
        "bwd_bytes": bwd_bytes,
        "fwd_ms": ms(fwd_flops, fwd_bytes),
        "bwd_ms": ms(bwd_flops, bwd_bytes),
        "fwdbwd_ms": ms(fwd_flops + bwd_flops, fwd_bytes + bwd_bytes),
    }


def make_inputs(batch, seq_len, heads, dim_k, dim_v, gated=True):
    q = torch.randn(batch, seq_len, heads, dim_k, device="cuda", dtype=torch.bfloat16)
    k = F.normalize(torch.randn(batch, seq_len, heads, dim_k, device="cuda"), dim=-1).bfloat16()
    v = torch.randn(batch, seq_len, heads, dim_v, device="cuda", dtype=torch.bfloat16)
    beta = torch.rand(batch, seq_len, heads, device="cuda").bfloat16()
    g = F.logsigmoid(torch.randn(batch, seq_len, heads, device="cuda"))
    if not gated:
        g = torch.zeros_like(g)
    return [x.requires_grad_() for x in (q, k, v, g, beta)]


def _error(exc: BaseException) -> str:
    lines = str(exc).splitlines()
    return f"{type(exc).__name__}: {lines[0][:300] if lines else ''}"


def time_fwd_bwd(forward, inputs) -> dict[str, object]:
    """Median ms of forward, backward alone, forward+backward; errors are recorded, not raised."""
    result: dict[str, object] = {}
    try:
        with torch.no_grad():
            result["fwd_ms"] = do_bench(lambda: forward(*inputs), return_mode="median")
    except Exception as exc:
        result["fwd_error"] = _error(exc)
        return result
    try:
        out = forward(*inputs)
        do = torch.randn_like(out)
        result["bwd_ms"] = do_bench(
            lambda: out.backward(do, retain_graph=True), grad_to_none=inputs, return_mode="median"
        )
        result["fwdbwd_ms"] = do_bench(
            lambda: forward(*inputs).backward(do), grad_to_none=inputs, return_mode="median"
        )
    except Exception as exc:
        result["bwd_error"] = _error(exc)
    return result


def ours(q, k, v, g, beta):
    return chunk_gated_delta_rule(q, k, v, g, beta)[0]


def environment(device_name: str, fla_version: str | None) -> dict[str, object]:
    """Where and when the numbers were taken (recorded in the JSON report)."""
    return {
        "device": device_name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "fla": fla_version,
        "fla_expected": FLA_VERSION,
        "sixteen_bit_compute": _precision.SIXTEEN_BIT_COMPUTE,
        "fp32_dots": _precision.FP32_DOTS,
        "gdn_forward": gdn_chunk.FORWARD,
        "gdn_backward": gdn_chunk.BACKWARD,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def _div(a: object, b: object) -> float | None:
    if isinstance(a, float | int) and isinstance(b, float | int) and b and not math.isnan(b):
        return float(a) / float(b)
    return None


def ratios(row: dict) -> dict[str, float | None]:
    """Ours / theirs for every pass (< 1: ours faster): gated vs fla GDN, g = 0 vs fla
    DeltaNet, gated vs the roofline, and the naive fp32 recurrence's forward / ours."""
    ours_g, ours_0 = row.get("ours_gated", {}), row.get("ours_g0", {})
    fla_g, fla_d = row.get("fla_gated", {}), row.get("fla_delta", {})
    out: dict[str, float | None] = {}
    for key in ("fwd_ms", "bwd_ms", "fwdbwd_ms"):
        name = key[: -len("_ms")]
        out[f"ours_over_fla_gdn_{name}"] = _div(ours_g.get(key), fla_g.get(key))
        out[f"ours_g0_over_fla_deltanet_{name}"] = _div(ours_0.get(key), fla_d.get(key))
        out[f"ours_over_roofline_{name}"] = _div(ours_g.get(key), row["roofline"][key])
    out["naive_over_ours_fwd"] = _div(row.get("naive_fp32_fwd_ms"), ours_g.get("fwd_ms"))
    return out


def sixteen_bit_option(parser: argparse.ArgumentParser) -> None:
    """``--sixteen-bit-compute``: how bf16 inputs run (kernels/_precision.py), fp32 copies
    (the default, what the contracts verify) or the kernels' own TF32 path, to time the
    default against; ``--fp32-dots``: how the fp32 dots run (IEEE, or three TF32 products).
    ``apply_sixteen_bit`` sets both; ``environment`` records them."""
    parser.add_argument(
        "--sixteen-bit-compute",
        choices=("fp32", "tf32"),
        default=_precision.SIXTEEN_BIT_COMPUTE,
        help="_precision.SIXTEEN_BIT_COMPUTE for the whole family (default: %(default)s)",
    )
    parser.add_argument(
        "--fp32-dots",
        choices=_precision.FP32_DOT_CHOICES,
        default=_precision.FP32_DOTS,
        help="_precision.FP32_DOTS for the whole family (default: %(default)s)",
    )


def apply_sixteen_bit(args: argparse.Namespace) -> None:
    _precision.SIXTEEN_BIT_COMPUTE = args.sixteen_bit_compute
    _precision.FP32_DOTS = args.fp32_dots


def forward_option(parser: argparse.ArgumentParser) -> None:
    """``--forward``: which Gated DeltaNet forward runs (gdn/chunk.py's FORWARD): the shipped
    "staged" kernels, or the opt-in "registers" ones (kernels/gdn/chunk_fwd_fast.py, three
    launches, register operands, tf32x3 dots whatever ``--fp32-dots`` says). The backward
    is the same either way. ``environment`` records it as ``gdn_forward``."""
    parser.add_argument(
        "--forward",
        choices=gdn_chunk.FORWARD_CHOICES,
        default=gdn_chunk.FORWARD,
        help="gdn.chunk.FORWARD, the Gated DeltaNet forward (default: %(default)s)",
    )


def backward_option(parser: argparse.ArgumentParser) -> None:
    """``--backward``: which Gated DeltaNet backward runs after the shared reverse scan
    (gdn/chunk.py's BACKWARD): the shipped "staged" kernels, or the opt-in "registers" ones
    (kernels/gdn/chunk_bwd_fast.py: three chunk-parallel launches instead of five, register
    operands, tf32x3 dots whatever ``--fp32-dots`` says). ``environment`` records it as
    ``gdn_backward``."""
    parser.add_argument(
        "--backward",
        choices=gdn_chunk.BACKWARD_CHOICES,
        default=gdn_chunk.BACKWARD,
        help="gdn.chunk.BACKWARD, the Gated DeltaNet backward (default: %(default)s)",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="benchmarks/results/gdn-h200.json")
    parser.add_argument("--seq-lens", default="512,1024,2048,4096,8192,16384")
    parser.add_argument("--naive-seq-lens", default="512,4096")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument(
        "--profile",
        action="store_true",
        help="per-kernel times of fwd+bwd at T=4096 for several launch configs",
    )
    parser.add_argument(
        "--watchdog",
        type=float,
        default=0.0,
        help="dump every thread's stack to stderr every this many seconds (0: never); "
        "compiles and fla's autotuning take minutes, and a run stopped at a deadline then "
        "says where it was",
    )
    sixteen_bit_option(parser)
    forward_option(parser)
    backward_option(parser)
    args = parser.parse_args()
    apply_sixteen_bit(args)
    gdn_chunk.FORWARD = args.forward
    gdn_chunk.BACKWARD = args.backward
    if args.watchdog > 0:
        faulthandler.dump_traceback_later(args.watchdog, repeat=True)
    if args.profile:
        profile(args.batch, 4096, args.heads, args.dim)
        return

    started = time.monotonic()
    try:
        import fla
        from fla.ops.delta_rule import chunk_delta_rule
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_gated

        fla_version = fla.__version__
    except Exception as exc:
        print(f"flash-linear-attention unavailable: {exc}", file=sys.stderr)
        fla_gated = chunk_delta_rule = None
        fla_version = None

    print(f"fla {fla_version} imported in {time.monotonic() - started:.1f} s", flush=True)
    if fla_version is not None and fla_version != FLA_VERSION:
        print(f"note: fla {fla_version}, the comparison asks for {FLA_VERSION}", file=sys.stderr)
    report = {
        "kernel": "gated_delta_rule",
        **environment(torch.cuda.get_device_name(), fla_version),
        "dtype": "bf16 (q, k, v, beta), fp32 (g, state)",
        "shape": {"B": args.batch, "H": args.heads, "K": args.dim, "V": args.dim},
        "timing": "triton.testing.do_bench median, ms",
        "roofline_model": {
            "hbm_bytes_per_s": HBM_BYTES_PER_S,
            "bf16_flops_per_s": BF16_FLOPS_PER_S,
        },
        "rows": [],
    }
    out_path = Path(args.out)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    naive_lens = {int(t) for t in args.naive_seq_lens.split(",") if t}
    dims = (args.batch, args.heads, args.dim, args.dim)
    seq_lens = [int(t) for t in args.seq_lens.split(",")]
    # the headline length first, so a deadline leaves it measured; rows are kept sorted by T
    for seq_len in sorted(seq_lens, key=lambda t: (t != 4096, t)):
        batch, heads, dim_k, dim_v = dims
        row: dict[str, object] = {
            "T": seq_len,
            "roofline": roofline(batch, seq_len, heads, dim_k, dim_v),
        }
        gated = make_inputs(batch, seq_len, heads, dim_k, dim_v)
        ungated = make_inputs(batch, seq_len, heads, dim_k, dim_v, gated=False)
        report["rows"].append(row)
        report["rows"].sort(key=lambda r: r["T"])
        contenders = [("ours_gated", ours, gated), ("ours_g0", ours, ungated)]
        if fla_gated is not None:
            contenders += [
                ("fla_gated", lambda q, k, v, g, b: fla_gated(q, k, v, g, b)[0], gated),
                ("fla_delta", lambda q, k, v, g, b: chunk_delta_rule(q, k, v, b)[0], ungated),
            ]
        for name, forward, inputs in contenders:
            print(f"T={seq_len} {name}: timing", flush=True)
            started = time.monotonic()
            row[name] = time_fwd_bwd(forward, inputs)
            # first calls compile (fla also autotunes): say how long, and keep what we have,
            # so a run stopped at a deadline still leaves every finished measurement
            print(f"T={seq_len} {name}: {time.monotonic() - started:.1f} s", flush=True)
            out_path.write_text(json.dumps(report, indent=1))
        if seq_len in naive_lens:
            with torch.no_grad():
                row["naive_fp32_fwd_ms"] = do_bench(
                    lambda xs=gated: naive_recurrent_gated_delta_rule(
                        *xs, compute_dtype=torch.float32
                    ),
                    warmup=1,
                    rep=1,
                    return_mode="median",
                )
        row["ratios"] = ratios(row)
        out_path.write_text(json.dumps(report, indent=1))
        print_row(row)
        del gated, ungated
        torch.cuda.empty_cache()
    print(f"wrote {out_path}")


def profile(batch: int, seq_len: int, heads: int, dim: int) -> None:
    """Per-kernel CUDA time (torch.profiler) of forward+backward for a few launch configs, to
    choose the fixed NUM_WARPS / SCAN_BLOCK_V defaults of kernelgate.kernels.gdn.chunk."""
    from kernelgate.kernels.gdn import chunk as chunk_module

    inputs = make_inputs(batch, seq_len, heads, dim, dim)
    do = torch.randn(batch, seq_len, heads, dim, device="cuda", dtype=torch.bfloat16)
    defaults = dict(chunk_module.NUM_WARPS)
    # "default": the shipped per-kernel warps (8 for the forward kernels and the backward
    # scan, whose fp32 dots need them to compile without spills; 4 elsewhere); 4: all at 4.
    for warps_name in ("default", "4"):
        for scan_block_v in (16, 32):
            for name in chunk_module.NUM_WARPS:
                chunk_module.NUM_WARPS[name] = defaults[name] if warps_name == "default" else 4
            chunk_module.SCAN_BLOCK_V = scan_block_v
            label = f"num_warps={warps_name} scan_block_v={scan_block_v}"
            try:
                for _ in range(3):  # compile and warm up
                    ours(*inputs).backward(do)
                torch.cuda.synchronize()
            except Exception as exc:  # e.g. out of shared memory
                print(f"{label}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
                continue
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                for _ in range(5):
                    ours(*inputs).backward(do)
                torch.cuda.synchronize()
            total = do_bench(
                lambda: ours(*inputs).backward(do), grad_to_none=inputs, return_mode="median"
            )
            print(f"{label}: fwd+bwd {total:.3f} ms")
            for event in prof.key_averages():
                if "kernel" in event.key:
                    print(f"   {event.key:22} {event.device_time_total / 5 / 1e3:8.3f} ms")
    chunk_module.NUM_WARPS.update(defaults)
    chunk_module.SCAN_BLOCK_V = None


def _fmt(x: object) -> str:
    return f"{x:8.3f}" if isinstance(x, float) else f"{'-':>8}"


def _ratio(a: object, b: object) -> str:
    ratio = _div(a, b)
    return f"{'-':>7}" if ratio is None else f"{ratio:7.2f}"


def print_row(row: dict) -> None:
    """One block per T: ms and the ratios ours/fla and ours/roofline (< 1 means ours faster)."""
    ours_g, ours_0 = row["ours_gated"], row["ours_g0"]
    fla_g, fla_d = row.get("fla_gated", {}), row.get("fla_delta", {})
    roof = row["roofline"]
    print(f"T={row['T']}: (ms; ratio < 1 means ours is faster)")
    print(
        f"  {'pass':8} {'ours':>8} {'fla_gdn':>8} {'ours/fla':>8} {'ours_g0':>8} {'fla_dr':>8} "
        f"{'g0/fla':>7} {'roofline':>8} {'ours/roof':>9}"
    )
    for key, name in (("fwd_ms", "fwd"), ("bwd_ms", "bwd"), ("fwdbwd_ms", "fwd+bwd")):
        print(
            f"  {name:8} {_fmt(ours_g.get(key))} {_fmt(fla_g.get(key))} "
            f"{_ratio(ours_g.get(key), fla_g.get(key)):>8} {_fmt(ours_0.get(key))} "
            f"{_fmt(fla_d.get(key))} {_ratio(ours_0.get(key), fla_d.get(key))} "
            f"{_fmt(roof[key])} {_ratio(ours_g.get(key), roof[key]):>9}"
        )
    for label, result in (("ours", ours_g), ("ours g=0", ours_0), ("fla gated", fla_g)):
        for key in ("fwd_error", "bwd_error"):
            if key in result:
                print(f"  {label} {key[:3]}: {result[key]}")
    if "fwd_error" in fla_d or "bwd_error" in fla_d:
        print(f"  fla delta rule: {fla_d.get('fwd_error') or fla_d.get('bwd_error')}")
    speedup = _div(row.get("naive_fp32_fwd_ms"), ours_g.get("fwd_ms"))
    if speedup is not None:
        print(
            f"  naive recurrence (fp32, forward): {row['naive_fp32_fwd_ms']:.1f} ms, ours is "
            f"{speedup:.0f}x faster"
        )


if __name__ == "__main__":
    try:
        main()
    except Exception:
        traceback.print_exc()
        raise
