"""Registers and spills of the GLA and KDA kernels compiled offline for sm_90 (RES-02's CPU
path), without a GPU.

Records the kernels' launches under the Triton interpreter at K = V = 128 (bf16 and fp32) and
at the examples' K = V = 32, compiles each specialization offline for sm_90 in a process
without the interpreter (kernelgate.sandbox.resources.compile_records, as
tests/kernels/test_gdn.py does for gdn), and prints registers and ptxas spill-store bytes.

    PYTHONPATH=src python benchmarks/gla_kda_resources.py [--triton36 /tmp/tr36site] [--json OUT]

``--triton36`` names a folder holding Triton 3.6.0, compiled with as well (first on the compile
process's PYTHONPATH, as benchmarks/gdn_bwd_resources.py does): the device runs 3.6.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before any kernel is defined

import torch
import torch.nn.functional as F
from _offline_compile import compile_offline, triton_sites

from kernelgate.kernels.gla import chunk_gla
from kernelgate.kernels.kda import chunk_kda

ROOT = Path(__file__).resolve().parents[1]
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
    parser.add_argument("--triton36", default="/tmp/tr36site", help="folder holding Triton 3.6")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args()
    rows = []
    for member in ("gla", "kda"):
        records = record_launches(member)
        candidate = ROOT / "examples" / member / "candidate.py"
        for site in triton_sites(args.triton36):
            version, results = compile_offline(records, candidate, site, timeout=1200)
            for record, result in zip(records, results, strict=True):
                rows.append(
                    {
                        "triton": version,
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
            f"triton {row['triton']:6} {row['member']:4} {row['kernel']:22} K={row['K']:<4} "
            f"{row['PREC']:5} regs={row['registers']} spill={row['spill_bytes']} "
            f"{'ERROR ' + str(row['error'])[:200] if row['error'] else ''}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
