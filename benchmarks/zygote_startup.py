"""What the judge zygote saves: a judge's start-up, and a whole small audit (issue 19).

Two measures, each with fresh judge processes (``KERNELGATE_ZYGOTE=0``, as before the
zygote) and with judges forked by the zygote:

- ``judge_started_s``: seconds from the audit's launch of a record's judge to the start of
  its judging (the row's field: Python's start and the imports of torch and kernelgate, or
  a fork), over ``--records`` records judged one after another by ``judge_isolated`` in this
  process. The zygote's first record also pays the zygote's own start: it is reported apart.
- ``audit_wall_s``: the wall time of ``kernelgate audit`` over the same corpus with
  ``--workers`` judges, and the median ``judge_started_s`` of its rows.

The corpus is the audit tests' tiny pairs corpus (an honest relu and a NaN swallower, in
turn), judged partially by default (``--only EXC-01``, RES-01 always runs): start-up is
what is measured, and it does not depend on the gates. ``--all-gates`` judges every gate.

    PYTHONPATH=src .venv/bin/python benchmarks/zygote_startup.py                # CPU
    PYTHONPATH=src python benchmarks/zygote_startup.py --device cuda --workers 12 --records 24
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the tests' corpus

from kernelgate.audit import zygote  # noqa: E402
from kernelgate.audit.judge import AuditOptions, judge_isolated  # noqa: E402
from kernelgate.audit.store import STORE_NAME  # noqa: E402
from kernelgate.formats.corpus import read_corpus  # noqa: E402
from tests.audit_corpus import CANDIDATES, REFERENCE  # noqa: E402


def write_corpus(folder: Path, records: int) -> Path:
    """``records`` pairs, honest and NaN-swallowing in turn, each in a folder of its own."""
    for index in range(records):
        kind = ("honest", "nan_swallow")[index % 2]
        record = folder / f"r{index:03d}_{kind}"
        record.mkdir(parents=True)
        (record / "reference.py").write_text(REFERENCE)
        (record / "candidate.py").write_text(CANDIDATES[kind])
    return folder


def summary(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"n": 0, "median": None, "mean": None, "min": None, "max": None}
    return {
        "n": len(values),
        "median": round(statistics.median(values), 3),
        "mean": round(statistics.fmean(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def judge_one_by_one(
    corpus: Path, out: Path, args: argparse.Namespace, use_zygote: bool
) -> dict[str, Any]:
    os.environ[zygote.ENABLE_ENV] = "1" if use_zygote else "0"
    options = AuditOptions(
        out_dir=str(out), device=args.device, timeout=args.timeout, only=args.only
    )
    threads = max(1, (os.cpu_count() or 1) // args.workers)
    started, walls, via, verdicts = [], [], [], []
    for record in read_corpus(corpus):
        began = time.monotonic()
        row = judge_isolated(
            record, options, gpu="0" if args.device == "cuda" else None, threads=threads
        )
        walls.append(time.monotonic() - began)
        started.append(row.get("judge_started_s"))
        via.append(row.get("judge_via"))
        verdicts.append(row["verdict"])
    first, rest = started[0], [s for s in started[1:] if s is not None]
    return {
        "judge_via": sorted(set(map(str, via))),
        "verdicts": verdicts,
        "first_judge_started_s": first,
        "judge_started_s": summary(rest),
        "record_wall_s": summary(walls[1:]),
    }


def audit(corpus: Path, out: Path, args: argparse.Namespace, use_zygote: bool) -> dict[str, Any]:
    command = [sys.executable, "-m", "kernelgate.cli", "audit", str(corpus), "--out", str(out)]
    command += ["--workers", str(args.workers), "--timeout", str(args.timeout)]
    command += ["--device", args.device]
    for gate in args.only or ():
        command += ["--only", gate]
    env = {**os.environ, zygote.ENABLE_ENV: "1" if use_zygote else "0"}
    began = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    wall = time.monotonic() - began
    rows = []
    if (out / STORE_NAME).exists():  # the store's rows (summary.json's leave these fields out)
        with sqlite3.connect(out / STORE_NAME) as db:
            rows = [json.loads(data) for (data,) in db.execute("SELECT data FROM rows")]
    return {
        "returncode": done.returncode,
        "audit_wall_s": round(wall, 2),
        "judge_started_s": summary(
            [r["judge_started_s"] for r in rows if r.get("judge_started_s")]
        ),
        "judge_via": sorted({str(r.get("judge_via")) for r in rows}),
        "stderr_tail": done.stderr[-400:] if done.returncode else "",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=6)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--timeout", type=float, default=2.0)
    parser.add_argument("--all-gates", action="store_true")
    parser.add_argument("--no-audit", action="store_true")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.only = None if args.all_gates else ("EXC-01",)
    results: dict[str, Any] = {"args": {k: v for k, v in vars(args).items() if k != "json"}}
    with tempfile.TemporaryDirectory(prefix="kernelgate-zygote-bench-") as folder:
        root = Path(folder)
        corpus = write_corpus(root / "corpus", args.records)
        for use_zygote in (False, True):
            name = "zygote" if use_zygote else "plain"
            results[f"one_by_one_{name}"] = judge_one_by_one(
                corpus, root / f"one-{name}", args, use_zygote
            )
            print(name, json.dumps(results[f"one_by_one_{name}"]), flush=True)
        if not args.no_audit:
            for use_zygote in (False, True):
                name = "zygote" if use_zygote else "plain"
                results[f"audit_{name}"] = audit(corpus, root / f"audit-{name}", args, use_zygote)
                print(f"audit {name}", json.dumps(results[f"audit_{name}"]), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
