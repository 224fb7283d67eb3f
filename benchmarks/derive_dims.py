"""Derive contracts for KernelBench references of a CUDA-L1 corpus and report their dims.

Measures what ``derive_contract`` makes of real references: which dims vary, which are
fixed and why, and how long a derivation takes. Run it under two source trees (say, main's
and a branch's) and compare the JSON outputs with ``--compare``::

    PYTHONPATH=src python benchmarks/derive_dims.py CORPUS.jsonl --count 40 --out new.json
    python benchmarks/derive_dims.py --compare old.json new.json

References are written to a temporary folder (they are corpus data: nothing is kept).
Records are taken at an even stride over the file, one per (level, task).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _pick(corpus: Path, count: int) -> list[tuple[str, str]]:
    records, seen = [], set()
    for line in corpus.read_text().splitlines():
        if not line.strip():
            continue
        data = json.loads(line)
        key = (data.get("level_id"), data.get("task_id"))
        if key in seen or not isinstance(data.get("ref_code"), str):
            continue
        seen.add(key)
        records.append((f"L{key[0]}/T{key[1]}", data["ref_code"]))
    stride = max(len(records) / max(count, 1), 1.0)
    return [records[int(i * stride)] for i in range(min(count, len(records)))]


def _dim_row(dim: Any) -> dict[str, Any]:
    row = {
        "name": dim.name,
        "reference": dim.reference,
        "varies": dim.varies,
        "min": dim.min,
        "max": dim.max,
        "multiple_of": dim.multiple_of,
    }
    for extra in ("fixed_because", "restricted_because", "probes"):
        if hasattr(dim, extra):
            row[extra] = getattr(dim, extra)
    return row


def derive_one(path: Path) -> dict[str, Any]:
    """One reference's derived dims and the seconds the derivation took (import excluded)."""
    import torch

    from kernelgate.contract.derive import derive_contract
    from kernelgate.formats.kernelbench import load_reference

    torch.set_num_threads(1)
    row: dict[str, Any] = {}
    program = load_reference(path)
    started = time.perf_counter()
    try:
        contract = derive_contract(program)
        row["dims"] = [_dim_row(d) for d in contract.dims]
        row["provenance"] = contract.provenance.detail
    except Exception as exc:  # report it, keep going
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    row["seconds"] = round(time.perf_counter() - started, 3)
    return row


def derive(corpus: Path, count: int, timeout: float) -> list[dict[str, Any]]:
    """Each picked reference derived in a child process of its own, killed after
    ``timeout`` seconds (the row then says so)."""
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for record_id, source in _pick(corpus, count):
            path = Path(folder) / f"{record_id.replace('/', '_')}.py"
            path.write_text(source)
            try:
                done = subprocess.run(
                    [sys.executable, __file__, "--one", str(path)],
                    capture_output=True,
                    text=True,
                    timeout=timeout,
                )
                lines = done.stdout.strip().splitlines()
                row = json.loads(lines[-1]) if lines else {"error": done.stderr[-300:]}
            except subprocess.TimeoutExpired:
                row = {"error": f"timed out after {timeout:g} s", "seconds": timeout}
            row = {"record": record_id, **row}
            print(record_id, row.get("seconds"), row.get("error", ""), file=sys.stderr, flush=True)
            rows.append(row)
    return rows


def compare(old_rows: list[dict[str, Any]], new_rows: list[dict[str, Any]]) -> str:
    old = {r["record"]: r for r in old_rows}
    lines, totals = [], {"old_varying": 0, "new_varying": 0, "old_dims": 0, "new_dims": 0}
    fixed_why: list[str] = []
    for new in new_rows:
        before = old.get(new["record"], {})
        old_dims = {d["name"]: d for d in before.get("dims", [])}
        new_dims = {d["name"]: d for d in new.get("dims", [])}
        old_vary = sorted(n for n, d in old_dims.items() if d["varies"])
        new_vary = sorted(n for n, d in new_dims.items() if d["varies"])
        totals["old_varying"] += len(old_vary)
        totals["new_varying"] += len(new_vary)
        totals["old_dims"] += len(old_dims)
        totals["new_dims"] += len(new_dims)
        ranged = [
            f"{n}[{d['min']},{d['max'] if d['max'] is not None else 'inf'}]%{d['multiple_of']}"
            for n, d in new_dims.items()
            if d["varies"] and (d["min"] > 1 or d["max"] is not None or d["multiple_of"] > 1)
        ]
        lines.append(
            f"{new['record']:10} old {len(old_vary)}/{len(old_dims)} new {len(new_vary)}/"
            f"{len(new_dims)}  +{sorted(set(new_vary) - set(old_vary))}"
            f" -{sorted(set(old_vary) - set(new_vary))} ranged {ranged}"
            f"  {before.get('seconds', float('nan')):.2f}s -> {new['seconds']:.2f}s"
            + (f"  ERROR {new['error']}" if "error" in new else "")
        )
        for name, dim in new_dims.items():
            if not dim["varies"]:
                fixed_why.append(f"{new['record']} {name}: {dim.get('fixed_because')}")

    def stats(rows: list[dict[str, Any]]) -> str:
        seconds = [r["seconds"] for r in rows]
        return f"median {statistics.median(seconds):.2f} s, max {max(seconds):.2f} s"

    lines.append(
        f"varying dims: {totals['old_varying']} of {totals['old_dims']} -> "
        f"{totals['new_varying']} of {totals['new_dims']}"
    )
    lines.append(f"seconds old: {stats(old_rows)}; new: {stats(new_rows)}")
    lines.append("fixed dims and why:")
    lines.extend("  " + line for line in fixed_why)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", nargs="?", type=Path)
    parser.add_argument("--count", type=int, default=40)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("OLD", "NEW"))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per reference")
    parser.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(derive_one(args.one)))
        return
    if args.compare:
        old, new = (json.loads(p.read_text()) for p in args.compare)
        print(compare(old, new))
        return
    rows = derive(args.corpus, args.count, args.timeout)
    text = json.dumps(rows, indent=1)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
