"""Registers and spill stores of the Gated DeltaNet backward kernels, compiled offline for
sm_90 with two Triton versions, without a GPU.

RES-02's CPU path, as benchmarks/gla_kda_resources.py and ssd_resources.py use it: run
``chunk_gated_delta_rule`` forward and backward under the Triton interpreter with kernelgate's
launch recorder (with an initial state and a final-state gradient, as the backward example
examples/gdn_backward/ calls it), keep the backward kernels' launches, then compile each
recorded specialization for sm_90 in a process without the interpreter
(``kernelgate.sandbox.resources.compile_records``) and print ptxas's registers and spill-store
bytes. The compile runs once per Triton installation: the device runs Triton 3.6 while this
machine has 3.9, and the two emit different PTX for the same kernel, so a kernel is only
spill-free for RES-02 when it is under both.

    PYTHONPATH=src python benchmarks/gdn_bwd_resources.py [--triton36 /tmp/tr36site] [--forward]
        [--forward-only] [--from-evidence VERDICT.json] [--out FILE]

``--forward`` records the forward kernels' launches too. ``--forward-only`` runs only the
forward, over the wider grid ``FORWARD_CASES`` (every K in {1, 31, 32, 64, 128} with every V in
{1, 31, 32, 128}, fp32 and bf16, one and two heads, with and without an initial state: the
tiny, ragged and block-sized head dims CMP-03 draws), and compiles each distinct forward
specialization once. ``--from-evidence`` compiles, instead
of recorded launches, every specialization a verdict's RES-02 evidence lists (what the CPU
judge compiled with the installed Triton), so the judge's own kernel set can be compiled with
Triton 3.6 as well (a whole verify under Triton 3.6 cannot run here: its interpreter fails
with this machine's numpy). ``--triton36`` names a folder holding Triton 3.6.0
(``pip install --target DIR --no-deps triton==3.6.0``); it is put first on the compile
process's PYTHONPATH. Not a test: the two offline compiles of every case take minutes on a
shared two-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before any kernel is defined

import torch

ROOT = Path(__file__).resolve().parents[1]
try:
    import kernelgate  # noqa: F401
except ImportError:  # run from a checkout without installing it
    sys.path.insert(0, str(ROOT / "src"))

import torch.nn.functional as F  # noqa: E402
from _offline_compile import compile_offline, triton_sites  # noqa: E402

from kernelgate.kernels.gdn import chunk_gated_delta_rule  # noqa: E402
from kernelgate.sandbox.resources import LaunchRecorder  # noqa: E402

# (T, K, V, dtype), with batch 1 and HEADS heads: the batch and T reach only the grid and
# runtime arguments (the kernels keep T, B and the chunk count unspecialized, see chunk_bwd.py),
# while the head count is a constexpr (2: the example's). T = 70 is two chunks, the second
# ragged; K = 31 a ragged head size (masked tail of a 32-wide tile); 32 the example's;
# K or V = 1 and T = 1 are shapes the judge's CMP-03 launches.
CASES = (
    (70, 31, 31, torch.float32),
    (70, 31, 31, torch.bfloat16),
    (70, 32, 32, torch.float32),
    (70, 64, 64, torch.float32),
    (70, 64, 64, torch.bfloat16),
    (70, 128, 128, torch.float32),
    (70, 128, 128, torch.bfloat16),
    (70, 1, 32, torch.float32),
    (70, 32, 1, torch.float32),
    (1, 32, 32, torch.float32),
)
HEADS = int(os.environ.get("GDN_RES_HEADS", "2"))
# --forward-only: (T, K, V, dtype, heads, initial state); the forward kernels specialize on
# K, V, H, the dtype (PREC) and, in the scan, on whether there is an initial state.
FORWARD_CASES = tuple(
    (70, dim_k, dim_v, dtype, heads, with_h0)
    for dim_k in (1, 31, 32, 64, 128)
    for dim_v in (1, 31, 32, 128)
    for dtype in (torch.float32, torch.bfloat16)
    for heads in (1, 2)
    for with_h0 in (False, True)
)


def record_launches(forward: bool = False) -> list[dict]:
    """Every distinct backward-kernel specialization one forward and backward launches (and
    the forward kernels' too when ``forward``)."""
    from triton.runtime.interpreter import InterpretedFunction

    recorder = LaunchRecorder()
    original_run = InterpretedFunction.run
    recorder.install(interpreter=True)
    try:
        for seq_len, dim_k, dim_v, dtype in CASES:
            shape = (1, seq_len, HEADS)
            q = torch.randn(*shape, dim_k).to(dtype).requires_grad_()
            k = F.normalize(torch.randn(*shape, dim_k), dim=-1).to(dtype).requires_grad_()
            v = torch.randn(*shape, dim_v).to(dtype).requires_grad_()
            g = F.logsigmoid(torch.randn(shape)).requires_grad_()
            beta = torch.rand(shape).to(dtype).requires_grad_()
            h0 = torch.randn(1, HEADS, dim_k, dim_v).requires_grad_()
            o, ht = chunk_gated_delta_rule(
                q, k, v, g, beta, initial_state=h0, output_final_state=True
            )
            torch.autograd.grad((o, ht), (q, k, v, g, beta, h0), (torch.randn_like(o), ht))
        return [
            r
            for r in recorder.drain()
            if r.get("backend") == "triton-interpreter"
            and (forward or r["name"].endswith("_bwd_kernel"))
        ]
    finally:
        InterpretedFunction.run = original_run


def record_forward_launches() -> list[dict]:
    """Every distinct forward-kernel specialization over ``FORWARD_CASES`` (forward only)."""
    from triton.runtime.interpreter import InterpretedFunction

    recorder = LaunchRecorder()
    original_run = InterpretedFunction.run
    recorder.install(interpreter=True)
    try:
        with torch.no_grad():
            for seq_len, dim_k, dim_v, dtype, heads, with_h0 in FORWARD_CASES:
                shape = (1, seq_len, heads)
                q = torch.randn(*shape, dim_k).to(dtype)
                k = F.normalize(torch.randn(*shape, dim_k), dim=-1).to(dtype)
                v = torch.randn(*shape, dim_v).to(dtype)
                g = F.logsigmoid(torch.randn(shape))
                beta = torch.rand(shape).to(dtype)
                h0 = torch.randn(1, heads, dim_k, dim_v) if with_h0 else None
                chunk_gated_delta_rule(
                    q, k, v, g, beta, initial_state=h0, output_final_state=with_h0
                )
        records, seen = [], set()
        for r in recorder.drain():
            if r.get("backend") != "triton-interpreter" or not r["name"].endswith("_fwd_kernel"):
                continue
            key = json.dumps(
                {k: r.get(k) for k in ("name", "signature", "constexprs", "attrs", "options")},
                sort_keys=True,
            )
            if key not in seen:
                seen.add(key)
                records.append(r)
        return records
    finally:
        InterpretedFunction.run = original_run


def records_from_evidence(path: Path) -> list[dict]:
    """The launch records behind a verdict's RES-02 evidence (``verify --json``): every
    kernel specialization the judge compiled, to compile again with another Triton."""
    import inspect

    from kernelgate.kernels.gdn import chunk_bwd, chunk_bwd_fast, chunk_fwd, chunk_fwd_fast

    # the staged kernels and the register-resident ones (a verdict of candidate_registers.py)
    modules = (chunk_bwd, chunk_fwd, chunk_bwd_fast, chunk_fwd_fast)
    gate = next(g for g in json.loads(path.read_text())["gates"] if g["id"] == "RES-02")
    records = []
    for kernel in gate["evidence"]["kernels"]:
        jit = next(getattr(m, kernel["name"]) for m in modules if hasattr(m, kernel["name"]))
        records.append(
            {
                "backend": "triton-interpreter",
                "name": kernel["name"],
                "file": inspect.getsourcefile(jit.fn),
                **kernel["specialization"],
            }
        )
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triton36", default="/tmp/tr36site", help="folder holding Triton 3.6")
    parser.add_argument("--out", type=Path, help="also write the rows as JSON here")
    parser.add_argument(
        "--forward", action="store_true", help="the forward kernels' launches as well"
    )
    parser.add_argument(
        "--forward-only",
        action="store_true",
        help="only the forward kernels, over FORWARD_CASES (each specialization once)",
    )
    parser.add_argument(
        "--from-evidence",
        type=Path,
        help="compile the kernels of this verdict's RES-02 evidence instead of recording",
    )
    args = parser.parse_args()
    if args.from_evidence:
        records = records_from_evidence(args.from_evidence)
    elif args.forward_only:
        records = record_forward_launches()
    else:
        records = record_launches(args.forward)
    rows = []
    timings = {}
    sites = triton_sites(args.triton36)
    for site in sites:
        started = time.monotonic()
        version, results = compile_offline(
            records, ROOT / "examples" / "gdn_backward" / "candidate.py", site
        )
        timings[version] = round(time.monotonic() - started, 1)
        for record, result in zip(records, results, strict=True):
            constexprs = record["constexprs"]
            rows.append(
                {
                    "triton": version,
                    "kernel": result.get("name", record["name"]),
                    "K": constexprs.get("K"),
                    "V": constexprs.get("V"),
                    # _wy_apply_fwd_kernel: D = K (the W launch) or V (the U launch)
                    "D": constexprs.get("D"),
                    "H": constexprs.get("H"),
                    "initial_state": constexprs.get("HAS_H0"),
                    "precision": constexprs.get("PREC"),
                    "num_warps": record.get("options", {}).get("num_warps"),
                    "registers": result.get("registers"),
                    "spill_bytes": result.get("spill_bytes"),
                    "shared_bytes": result.get("shared"),
                    "error": result.get("error"),
                }
            )
            row = rows[-1]
            print(
                f"triton {version:6} {row['kernel']:20} H={row['H']!s:<2} K={row['K']!s:<4} "
                f"V={row['V']!s:<4} D={row['D']!s:<4} h0={row['initial_state']!s:<5} "
                f"{row['precision']!s:5} regs={row['registers']} spill={row['spill_bytes']}"
                + (f" ERROR {str(row['error'])[:200]}" if row["error"] else "")
            )
    spilling = [r for r in rows if r["error"] or r["spill_bytes"]]
    print(f"offline compile (s): {timings}; {len(spilling)} of {len(rows)} rows spill or fail")
    if args.out:
        report = {
            "what": "sm_90 offline compile of the gdn "
            + ("forward" if args.forward_only else "backward")
            + " kernels (RES-02's CPU path)",
            "command": "PYTHONPATH=src python benchmarks/gdn_bwd_resources.py"
            + (" --forward" if args.forward else "")
            + (" --forward-only" if args.forward_only else "")
            + " --out FILE",
            "from_evidence": str(args.from_evidence) if args.from_evidence else None,
            "cases": None
            if args.from_evidence
            else [
                [*c[:3], str(c[3]), *c[4:]] for c in (FORWARD_CASES if args.forward_only else CASES)
            ],
            "heads": [1, 2] if args.forward_only else HEADS,
            "compile_seconds": timings,
            "rows": rows,
        }
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
