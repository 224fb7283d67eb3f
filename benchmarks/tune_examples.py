"""Run ``kernelgate tune`` on the tunable examples (examples/tune/) and write
benchmarks/results/tune-<device>.json: for each, the chosen config beside Triton's own
pick (time and verdict), every config judged, and the search's settings.

Each run is the command line a user would type (its own process and workers). On the CPU
(the Triton interpreter) keep the budget small; the times then test the tuner, not the
kernels. On the H200 (Triton's own pick is measured there):

    PYTHONPATH=src .venv/bin/python benchmarks/tune_examples.py --device cuda \
        --rounds 3 --group 4 --screen CMP-01 MEM-01 --only-example softmax_knobs
    PYTHONPATH=src .venv/bin/python benchmarks/tune_examples.py --device cuda \
        --rounds 3 --group 4 --screen CMP-01 MEM-01 --only-example softmax_autotune
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_examples import _is_h200, versions

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
REFERENCE = ROOT / "examples" / "softmax" / "reference.py"
TUNE = ROOT / "examples" / "tune"
EXAMPLES = {
    "softmax_knobs (declared knobs, SPLIT=2 drops the tail)": TUNE / "softmax_knobs.py",
    "softmax_autotune (@triton.autotune, 5 configs)": TUNE / "softmax_autotune.py",
}


def tune(name: str, candidate: Path, args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    """One ``kernelgate tune`` run: its exit code and report, and the comparison row."""
    out = scratch / f"{candidate.stem}.json"
    argv = [sys.executable, "-m", "kernelgate.cli", "tune", str(REFERENCE), str(candidate)]
    argv += ["--device", args.device, "--json", str(out), "--seed", str(args.seed)]
    argv += ["--rounds", str(args.rounds), "--group", str(args.group)]
    if args.trials:
        argv += ["--trials", str(args.trials)]
    if args.max_evaluations:
        argv += ["--max-evaluations", str(args.max_evaluations)]
    for gate in args.screen or []:
        argv += ["--screen", gate]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT)
    run: dict[str, Any] = {
        "name": name,
        "command": "kernelgate " + " ".join(argv[3:]),
        "exit_code": done.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "stdout_tail": done.stdout[-4000:],
    }
    if not out.exists():
        run["stderr_tail"] = done.stderr[-3000:]
        return run
    report = json.loads(out.read_text())
    pick = report.get("triton_pick")
    run["comparison"] = {
        "chosen": report.get("chosen"),
        "chosen_time_ms": report.get("chosen_time_ms"),
        "chosen_verdict": report.get("chosen_verdict"),
        "triton_pick": None if pick is None else pick.get("knobs"),
        "triton_pick_time_ms": None if pick is None else pick.get("time_ms"),
        "triton_pick_verdict": None if pick is None else pick.get("verdict"),
        "triton_pick_why": report.get("triton_pick_why") or None,
        "rejected_configs": [c["knobs"] for c in report["configs"] if not c["passed"]],
    }
    run["report"] = report
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--group", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trials", type=int, default=0, help="judged trials (0: default)")
    parser.add_argument("--max-evaluations", type=int, default=0)
    parser.add_argument("--screen", nargs="*", help="gates per config (default: every gate)")
    parser.add_argument(
        "--only-example",
        nargs="*",
        help="substrings of example names to run; the other examples' runs already in the "
        "output file are kept (one example per command on a time-limited device)",
    )
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/tune-<device>")
    args = parser.parse_args()
    device_name = "cpu" if args.device == "cpu" else "h200" if _is_h200() else "cuda"
    out = args.out or RESULTS / f"tune-{device_name}.json"
    runs = []
    with tempfile.TemporaryDirectory(prefix="kernelgate-tune-") as folder:
        for name, candidate in EXAMPLES.items():
            if args.only_example and not any(s in name for s in args.only_example):
                continue
            print(f"{name} ...", flush=True)
            runs.append(tune(name, candidate, args, Path(folder)))
            print(f"  exit {runs[-1]['exit_code']} in {runs[-1]['seconds']} s", flush=True)
            print(json.dumps(runs[-1].get("comparison"), indent=2), flush=True)
    if args.only_example and out.exists():  # a partial run: keep the other examples' runs
        done = {run["name"] for run in runs}
        kept = json.loads(out.read_text()).get("runs", [])
        runs = [run for run in kept if run["name"] not in done] + runs
    result = {
        "schema": "kernelgate.tune-examples/1",
        "device": args.device,
        "versions": versions(args.device),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "runs": runs,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
