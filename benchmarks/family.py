"""Benchmark of our DeltaNet and Mamba-2 SSD kernels against the libraries that have them, on
one CUDA GPU: flash-linear-attention's ``chunk_delta_rule`` for DeltaNet, mamba_ssm's
``mamba_chunk_scan_combined`` for SSD (each only where it imports; a library that is missing or
fails is recorded as such, not raised). Also records our bf16 relative error against the
float64 recurrence at the smallest T, so a timing never stands for a wrong kernel.

Timing as in benchmarks/gdn.py (triton.testing.do_bench medians: forward alone, backward alone
of a built graph, forward+backward). Shapes: DeltaNet B=2, H=16, K=V=128 (the gdn benchmark's);
SSD b=2, H=32, P=64, G=1, N=128 (Mamba-2 at d_model 1024, expand 2), bf16 x, B, C, fp32 dt, A,
D.

    python3 benchmarks/family.py --out benchmarks/results/family-h200.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gdn import _error, apply_sixteen_bit, sixteen_bit_option, time_fwd_bwd

from kernelgate.kernels.delta_rule import chunk_delta_rule, naive_recurrent_delta_rule
from kernelgate.kernels.mamba2 import chunk_ssd, naive_recurrent_ssd

SEQ_LENS = (1024, 4096, 16384)


def delta_rule_inputs(seq_len: int) -> list[torch.Tensor]:
    batch, heads, dim = 2, 16, 128
    q = torch.randn(batch, seq_len, heads, dim, device="cuda", dtype=torch.bfloat16)
    k = F.normalize(torch.randn(batch, seq_len, heads, dim, device="cuda"), dim=-1).bfloat16()
    v = torch.randn(batch, seq_len, heads, dim, device="cuda", dtype=torch.bfloat16)
    beta = torch.rand(batch, seq_len, heads, device="cuda").bfloat16()
    return [t.requires_grad_() for t in (q, k, v, beta)]


def ssd_inputs(seq_len: int) -> list[torch.Tensor]:
    batch, heads, dim_p, groups, dim_n = 2, 32, 64, 1, 128
    x = torch.randn(batch, seq_len, heads, dim_p, device="cuda", dtype=torch.bfloat16)
    log_dt = torch.empty(batch, seq_len, heads, device="cuda").uniform_(
        math.log(1e-3), math.log(0.1)
    )
    A = -torch.empty(heads, device="cuda").uniform_(1.0, 16.0)
    B = (torch.randn(batch, seq_len, groups, dim_n, device="cuda") * dim_n**-0.5).bfloat16()
    C = (torch.randn(batch, seq_len, groups, dim_n, device="cuda") * dim_n**-0.5).bfloat16()
    D = torch.randn(heads, device="cuda")
    return [t.requires_grad_() for t in (x, log_dt.exp(), A, B, C, D)]


def rel_err(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.double() - ref).abs().max() / ref.abs().max()).item()


def competitors() -> dict[str, object]:
    """The libraries' functions, or the reason each is unavailable."""
    found: dict[str, object] = {}
    try:
        import fla
        from fla.ops.delta_rule import chunk_delta_rule as fla_delta_rule

        found["fla_delta"] = lambda q, k, v, beta: fla_delta_rule(q, k, v, beta)[0]
        found["fla_version"] = fla.__version__
    except Exception as exc:
        found["fla_delta_error"] = _error(exc)
    try:
        import mamba_ssm
        from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined

        found["mamba_ssm_ssd"] = lambda x, dt, A, B, C, D: mamba_chunk_scan_combined(
            x, dt, A, B, C, chunk_size=64, D=D
        )
        found["mamba_ssm_version"] = mamba_ssm.__version__
    except Exception as exc:
        found["mamba_ssm_ssd_error"] = _error(exc)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the JSON report here")
    parser.add_argument("--seq-lens", type=int, nargs="+", default=list(SEQ_LENS))
    sixteen_bit_option(parser)
    args = parser.parse_args()
    apply_sixteen_bit(args)
    found = competitors()
    report: dict[str, object] = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "fla": found.get("fla_version"),
        "mamba_ssm": found.get("mamba_ssm_version"),
        "unavailable": {k: v for k, v in found.items() if k.endswith("_error")},
        "sixteen_bit_compute": args.sixteen_bit_compute,
        "fp32_dots": args.fp32_dots,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "timing": "triton.testing.do_bench median, ms",
        "rows": [],
    }
    print(json.dumps({k: v for k, v in report.items() if k != "rows"}, indent=1), flush=True)

    # Accuracy first, at the smallest T: ours (bf16) against the float64 recurrence.
    small = min(args.seq_lens)
    dr = delta_rule_inputs(small)
    ref, _ = naive_recurrent_delta_rule(*(t.detach().double() for t in dr))
    report["delta_rule_bf16_rel_err"] = rel_err(chunk_delta_rule(*dr)[0], ref)
    ssd = ssd_inputs(small)
    ref, _ = naive_recurrent_ssd(
        *(t.detach().double() for t in ssd[:5]), D=ssd[5].detach().double()
    )
    report["ssd_bf16_rel_err"] = rel_err(chunk_ssd(*ssd[:5], D=ssd[5])[0], ref)
    print({k: report[k] for k in ("delta_rule_bf16_rel_err", "ssd_bf16_rel_err")}, flush=True)

    for seq_len in args.seq_lens:
        row: dict[str, object] = {"T": seq_len}
        started = time.monotonic()
        dr = delta_rule_inputs(seq_len)
        row["ours_delta"] = time_fwd_bwd(lambda q, k, v, b: chunk_delta_rule(q, k, v, b)[0], dr)
        if "fla_delta" in found:
            row["fla_delta"] = time_fwd_bwd(found["fla_delta"], dr)
        ssd = ssd_inputs(seq_len)
        row["ours_ssd"] = time_fwd_bwd(lambda *a: chunk_ssd(*a[:5], D=a[5])[0], ssd)
        if "mamba_ssm_ssd" in found:
            row["mamba_ssm_ssd"] = time_fwd_bwd(found["mamba_ssm_ssd"], ssd)
        for ours, theirs in (("ours_delta", "fla_delta"), ("ours_ssd", "mamba_ssm_ssd")):
            for key in ("fwd_ms", "bwd_ms", "fwdbwd_ms"):
                a, b = row.get(ours, {}).get(key), row.get(theirs, {}).get(key)
                if a is not None and b is not None:
                    row[f"{ours}_over_{theirs}_{key[:-3]}"] = a / b
        row["seconds"] = round(time.monotonic() - started, 1)
        print(json.dumps(row), flush=True)
        report["rows"].append(row)
        if args.out:  # after every row: a run cut at its limit keeps what finished
            args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
