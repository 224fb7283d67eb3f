"""Registers and spills of the kernels a verdict's RES-02 compiled, again offline for sm_90
with each installed Triton (this machine's 3.9 and, with ``--triton36``, the device's 3.6).

Why: a CPU verify judges RES-02 with the installed Triton, while the device compiles with
3.6, and the two can differ (gdn's ``_wy_fwd_kernel`` spilled with 3.6 only at K = 31). The
records come from the evidence itself, so exactly the specializations the judge saw (every
held-out shape included) are compiled, not a hand-picked set; the kernels are looked up by
name in one member's kernel modules (delta_rule runs gdn's kernels: ``--kernels gdn``).

    PYTHONPATH=src python benchmarks/bwd_resources_from_evidence.py \\
        --evidence benchmarks/results/gla-bwd-verify-cpu.json --kernels gla \\
        --candidate examples/gla_backward/candidate.py --out FILE
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import time
from pathlib import Path

from _offline_compile import compile_offline, resource_fields, resource_text, triton_sites

ROOT = Path(__file__).resolve().parents[1]


def records_from_evidence(path: Path, kernels: str) -> list[dict]:
    """The launch records behind ``path``'s RES-02 evidence, each kernel resolved in
    ``kernelgate.kernels.<kernels>``'s chunk_fwd / chunk_bwd modules (names repeat across
    members, so the member is named, never guessed)."""
    modules = []
    for part in ("chunk_fwd", "chunk_bwd"):
        try:
            modules.append(importlib.import_module(f"kernelgate.kernels.{kernels}.{part}"))
        except ModuleNotFoundError:
            continue
    gate = next(g for g in json.loads(path.read_text())["gates"] if g["id"] == "RES-02")
    records = []
    for kernel in gate["evidence"]["kernels"]:
        found = [getattr(m, kernel["name"]) for m in modules if hasattr(m, kernel["name"])]
        if len(found) != 1:
            raise SystemExit(f"{kernel['name']}: {len(found)} definitions in {kernels}")
        records.append(
            {
                "backend": "triton-interpreter",
                "name": kernel["name"],
                "file": inspect.getsourcefile(found[0].fn),
                **kernel["specialization"],
            }
        )
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evidence", type=Path, required=True, help="a verify --json file")
    parser.add_argument("--kernels", required=True, help="member package: gdn, gla, kda, ...")
    parser.add_argument("--candidate", type=Path, required=True, help="the verdict's candidate")
    parser.add_argument("--triton36", default="/tmp/tr36site", help="folder holding Triton 3.6")
    parser.add_argument("--out", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args()
    records = records_from_evidence(args.evidence, args.kernels)
    rows, timings = [], {}
    for site in triton_sites(args.triton36):
        started = time.monotonic()
        version, results = compile_offline(records, args.candidate.resolve(), site)
        timings[version] = round(time.monotonic() - started, 1)
        for record, result in zip(records, results, strict=True):
            constexprs = record.get("constexprs", {})
            row = {
                "triton": version,
                "kernel": result.get("name", record["name"]),
                "K": constexprs.get("K"),
                "V": constexprs.get("V"),
                "num_warps": record.get("options", {}).get("num_warps"),
                **resource_fields(result),
            }
            rows.append(row)
            print(
                f"triton {version:6} {row['kernel']:20} K={row['K']!s:<4} V={row['V']!s:<4} "
                + resource_text(row)
            )
    spilling = [r for r in rows if r["spills"] or not r["fits_shared"]]
    print(
        f"offline compile (s): {timings}; {len(spilling)} of {len(rows)} rows spill, fail "
        "or exceed shared memory"
    )
    if args.out:
        report = {
            "what": "sm_90 offline compile of the kernels RES-02 judged in " + str(args.evidence),
            "command": "PYTHONPATH=src python benchmarks/bwd_resources_from_evidence.py "
            f"--evidence {args.evidence} --kernels {args.kernels} "
            f"--candidate {args.candidate} --out FILE",
            "compile_seconds": timings,
            "rows": rows,
        }
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
