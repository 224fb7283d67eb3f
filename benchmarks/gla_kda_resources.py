"""Registers and spills of the GLA and KDA kernels compiled offline for sm_90 (RES-02's CPU
path), without a GPU.

Records the kernels' launches under the Triton interpreter at K = V = 128 (bf16 and fp32) and
at the examples' K = V = 32, compiles each specialization offline for sm_90 in a process
without the interpreter (kernelgate.sandbox.resources.compile_records, as
tests/kernels/test_gdn.py does for gdn), and prints registers and ptxas spill-store bytes.

    PYTHONPATH=src python benchmarks/gla_kda_resources.py [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before any kernel is defined

import torch
import torch.nn.functional as F

from kernelgate.kernels.gla import chunk_gla
from kernelgate.kernels.kda import chunk_kda

ROOT = Path(__file__).resolve().parents[1]
COMPILE_SCRIPT = (
    "import json, sys\n"
    "from kernelgate.sandbox.resources import compile_records\n"
    "print(json.dumps(compile_records(sys.argv[1], json.load(sys.stdin))))\n"
)
CASES = ((128, torch.bfloat16), (128, torch.float32), (32, torch.float32))


def record_launches(member: str) -> list[dict]:
    """Every kernel specialization one forward and backward launches, per case."""
    from triton.runtime.interpreter import InterpretedFunction

    from kernelgate.sandbox.resources import LaunchRecorder

    recorder = LaunchRecorder()
    original_run = InterpretedFunction.run
    recorder.install(interpreter=True)
    try:
        for dim, dtype in CASES:
            shape = (1, 17, 1, dim)  # batch and T only reach the grid, not the specialization
            q = torch.randn(shape).to(dtype).requires_grad_()
            k = F.normalize(torch.randn(shape), dim=-1).to(dtype).requires_grad_()
            v = torch.randn(shape).to(dtype).requires_grad_()
            g = F.logsigmoid(torch.randn(shape)).requires_grad_()
            h0 = torch.randn(1, 1, dim, dim).requires_grad_()
            if member == "gla":
                o, ht = chunk_gla(q, k, v, g, initial_state=h0, output_final_state=True)
            else:
                beta = torch.rand(shape[:3]).to(dtype).requires_grad_()
                o, ht = chunk_kda(q, k, v, g, beta, initial_state=h0, output_final_state=True)
            (o.float().sum() + ht.sum()).backward()
        return [r for r in recorder.drain() if r.get("backend") == "triton-interpreter"]
    finally:
        InterpretedFunction.run = original_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    rows = []
    for member in ("gla", "kda"):
        records = record_launches(member)
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                COMPILE_SCRIPT,
                str(ROOT / "examples" / member / "candidate.py"),
            ],
            input=json.dumps(records),
            capture_output=True,
            text=True,
            env=env,
            timeout=1200,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(done.stderr[-3000:])
        results = json.loads(done.stdout.strip().splitlines()[-1])
        for record, result in zip(records, results, strict=True):
            rows.append(
                {
                    "member": member,
                    "kernel": result.get("name", record["name"]),
                    "K": record["constexprs"].get("K"),
                    "PREC": record["constexprs"].get("PREC"),
                    "registers": result.get("registers"),
                    "spill_bytes": result.get("spill_bytes"),
                    "shared_bytes": result.get("shared"),
                    "error": result.get("error"),
                }
            )
    for row in rows:
        print(
            f"{row['member']:4} {row['kernel']:22} K={row['K']:<4} {row['PREC']:5} "
            f"regs={row['registers']} spill={row['spill_bytes']} "
            f"{'ERROR ' + str(row['error'])[:200] if row['error'] else ''}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
