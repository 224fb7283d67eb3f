"""Run ``kernelgate bench`` on examples/softmax and on given CUDA-L1 records; write
benchmarks/results/bench-<device>.json (device, versions, date, every report).

Each run is the command line a user would type (its own process, its own workers), so the
numbers are the ones ``kernelgate bench`` prints. A CUDA-L1 record's ``ref_code`` and
``custom_code`` are written to a scratch folder first. On the H200:

    PYTHONPATH=src .venv/bin/python benchmarks/bench_examples.py --device cuda \
        --cuda-l1 ../shared/corpora/cuda-l1/h100.jsonl --ids L1/T24 L1/T25
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SOFTMAX = ROOT / "examples" / "softmax"


def versions(device: str) -> dict[str, Any]:
    """What the numbers rest on: the toolchain, the device and the code."""
    import torch
    import triton

    found: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "platform": platform.platform(),
    }
    if device.startswith("cuda") and torch.cuda.is_available():
        found["gpu"] = torch.cuda.get_device_name()
    try:
        found["kernelgate_commit"] = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()
    except OSError:
        found["kernelgate_commit"] = "unknown"
    return found


def cuda_l1_records(path: Path, ids: list[str], scratch: Path) -> list[tuple[str, Path, Path]]:
    """(record id, reference file, candidate file) for each of ``ids`` ("L1/T24" or
    "h100/L1/T24"), in the order given; an id not in the file is an error."""
    found: dict[str, tuple[Path, Path]] = {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        data = json.loads(line)
        record_id = f"{path.stem}/L{data.get('level_id')}/T{data.get('task_id')}"
        wanted = next((i for i in ids if record_id == i or record_id.endswith("/" + i)), None)
        if wanted is None or wanted in found:
            continue
        folder = scratch / record_id.replace("/", "_")
        folder.mkdir(parents=True)
        reference, candidate = folder / "reference.py", folder / "candidate.py"
        reference.write_text(data["ref_code"])
        candidate.write_text(data["custom_code"])
        found[wanted] = (reference, candidate)
    missing = [i for i in ids if i not in found]
    if missing:
        raise SystemExit(f"not in {path}: {', '.join(missing)}")
    return [(f"cuda-l1 {i}", *found[i]) for i in ids]


def bench(
    name: str, reference: Path, candidate: Path, args: argparse.Namespace, scratch: Path
) -> dict[str, Any]:
    """One ``kernelgate bench`` run: its exit code, verdict and perf report."""
    out = scratch / f"{name.replace('/', '_').replace(' ', '_')}.json"
    argv = [sys.executable, "-m", "kernelgate.cli", "bench", str(reference), str(candidate)]
    argv += ["--device", args.device, "--json", str(out), "--shapes", str(args.shapes)]
    if args.trials:
        argv += ["--trials", str(args.trials)]
    for gate in args.only or []:
        argv += ["--only", gate]
    started = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=ROOT)
    run: dict[str, Any] = {
        "name": name,
        "command": " ".join(argv[1:]),
        "exit_code": done.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "stdout_tail": done.stdout[-3000:],
    }
    if done.returncode == 2 or not out.exists():
        run["stderr_tail"] = done.stderr[-3000:]
        return run
    evidence = json.loads(out.read_text())
    run["verdict"] = evidence.get("verdict")
    run["failed_gates"] = evidence.get("failed_gates", [])
    run["failed_rules"] = evidence.get("failed_rules", [])
    run["perf"] = evidence.get("perf")
    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--cuda-l1", type=Path, help="a CUDA-L1 .jsonl file")
    parser.add_argument("--ids", nargs="*", default=[], help="record ids, e.g. L1/T24")
    parser.add_argument("--trials", type=int, default=0, help="judged trials (0: default)")
    parser.add_argument("--shapes", type=int, default=3)
    parser.add_argument("--only", nargs="*", help="gates to run before timing (default: all)")
    parser.add_argument("--out", type=Path, help="default: benchmarks/results/bench-<device>")
    args = parser.parse_args()
    device_name = "cpu" if args.device == "cpu" else "h200" if _is_h200() else "cuda"
    out = args.out or RESULTS / f"bench-{device_name}.json"
    with tempfile.TemporaryDirectory(prefix="kernelgate-bench-") as folder:
        scratch = Path(folder)
        plan = [("examples/softmax honest", SOFTMAX / "reference.py", SOFTMAX / "honest.py")]
        if args.cuda_l1 is not None:
            plan += cuda_l1_records(args.cuda_l1, args.ids, scratch)
        runs = []
        for name, reference, candidate in plan:
            print(f"{name} ...", flush=True)
            runs.append(bench(name, reference, candidate, args, scratch))
            perf = runs[-1].get("perf") or {}
            print(
                f"  verdict {runs[-1].get('verdict')}, speedup {perf.get('speedup')}, "
                f"verified {perf.get('verified_speedup')}, KernelBench's method "
                f"{perf.get('kernelbench_speedup')} ({runs[-1]['seconds']} s)",
                flush=True,
            )
    result = {
        "schema": "kernelgate.bench-examples/1",
        "device": args.device,
        "versions": versions(args.device),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "runs": runs,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {out}")


def _is_h200() -> bool:
    import torch

    return torch.cuda.is_available() and "H200" in torch.cuda.get_device_name()


if __name__ == "__main__":
    main()
