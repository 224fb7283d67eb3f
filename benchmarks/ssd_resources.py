"""Registers and spill stores of the Mamba-2 SSD kernels, compiled offline for sm_90.

RES-02's CPU path, as tests/kernels/test_gdn.py uses it for the gdn kernels: run chunk_ssd
forward and backward under the Triton interpreter with kernelgate's launch recorder, then
compile the recorded launches for sm_90 in a process without the interpreter
(kernelgate.sandbox.resources.compile_records) and print ptxas's registers and spill-store
bytes per kernel. Not a test: the offline compile of the twelve launches takes minutes on a
shared two-core machine, well past the suite's budget for one kernel family.

    PYTHONPATH=src python3 benchmarks/ssd_resources.py [--triton36 /tmp/tr36site] [--out FILE.json]

``--triton36`` names a folder holding Triton 3.6.0, compiled with as well (first on the compile
process's PYTHONPATH, as benchmarks/gdn_bwd_resources.py does): the device runs 3.6.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel is defined

import torch

ROOT = Path(__file__).resolve().parents[1]
try:
    import kernelgate  # noqa: F401
except ImportError:  # run from a checkout without installing it
    sys.path.insert(0, str(ROOT / "src"))

from _offline_compile import compile_offline, triton_sites  # noqa: E402

from kernelgate.kernels.mamba2 import chunk_ssd  # noqa: E402
from kernelgate.sandbox.resources import LaunchRecorder  # noqa: E402

# (b, T, H, G, N, P, dtype): the GPU test's head sizes in bf16 and fp32, and the example's.
SHAPES = (
    (1, 128, 2, 1, 128, 64, torch.bfloat16),
    (1, 128, 2, 1, 128, 64, torch.float32),
    (1, 130, 2, 1, 32, 32, torch.float32),
)


def record_launches() -> list[dict]:
    """Every distinct interpreted launch of the SSD kernels at SHAPES, forward and backward."""
    recorder = LaunchRecorder()
    recorder.install(interpreter=True)
    for batch, seq_len, heads, groups, dim_n, dim_p, dtype in SHAPES:
        x = torch.randn(batch, seq_len, heads, dim_p).to(dtype).requires_grad_()
        dt = torch.rand(batch, seq_len, heads).requires_grad_()
        A = -torch.rand(heads).requires_grad_()
        B = torch.randn(batch, seq_len, groups, dim_n).to(dtype).requires_grad_()
        C = torch.randn(batch, seq_len, groups, dim_n).to(dtype).requires_grad_()
        D = torch.randn(heads).requires_grad_()
        h0 = torch.randn(batch, heads, dim_n, dim_p).requires_grad_()
        y, _ = chunk_ssd(x, dt, A, B, C, D, initial_state=h0)
        y.float().sum().backward()
    return [
        r
        for r in recorder.drain()
        if r.get("backend") == "triton-interpreter" and r["name"].startswith("_ssd")
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triton36", default="/tmp/tr36site", help="folder holding Triton 3.6")
    parser.add_argument("--out", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    records = record_launches()
    candidate = ROOT / "examples" / "mamba2" / "candidate.py"
    rows = []
    for site in triton_sites(args.triton36):
        started = time.monotonic()
        version, results = compile_offline(records, candidate, site)
        for record, result in zip(records, results, strict=True):
            constexprs = record["constexprs"]
            rows.append(
                {
                    "triton": version,
                    "kernel": result.get("name"),
                    "N": constexprs.get("N"),
                    "P": constexprs.get("P"),
                    "precision": constexprs.get("PREC"),
                    "registers": result.get("registers"),
                    "spill_bytes": result.get("spill_bytes"),
                    "error": result.get("error"),
                }
            )
            print(json.dumps(rows[-1]))
        print(f"triton {version}: {len(records)} launches in {time.monotonic() - started:.0f} s")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
