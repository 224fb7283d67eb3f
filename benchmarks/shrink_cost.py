"""What shrinking adds to a verdict: the examples/softmax red-team kernels verified with
every gate, once without shrinking and once with the default budget (``ShrinkOptions``).

Prints, per kernel, both verdicts' seconds, the shrinking work per failed gate (calls,
seconds, from ``evidence.shrink``) and the shrunk inputs' shapes; ``--json OUT`` keeps it.
On a shared machine the two verdicts' difference is noisy; ``shrink_seconds`` (timed around
the shrinking itself, confirmation included) is the added time.

    PYTHONPATH=src .venv/bin/python benchmarks/shrink_cost.py \
        --json benchmarks/results/shrink-cpu.json
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time
from pathlib import Path

from kernelgate.pipeline import verify
from kernelgate.shrink import ShrinkOptions

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = ROOT / "examples" / "softmax"
KERNELS = ("nan_swallow", "monkeypatch_wrong", "answer_cache", "unwritten_tail")


def cpu_seconds() -> float:
    """User + system CPU of this process and its reaped children (the judge's own work: the
    confined workers are not its children and are not counted)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def measure(kernel: str, shrink: ShrinkOptions | None) -> dict[str, object]:
    started, cpu = time.monotonic(), cpu_seconds()
    verdict = verify(SOFTMAX / "reference.py", SOFTMAX / f"{kernel}.py", shrink=shrink)
    row: dict[str, object] = {
        "failed_gates": verdict.failed_gates,
        "seconds": round(time.monotonic() - started, 2),
        "cpu_seconds": round(cpu_seconds() - cpu, 2),
    }
    gates = {}
    for gate in verdict.gates:
        cx = gate.counterexample
        if cx is None:
            continue
        shrunk = cx.shrunk
        gates[gate.id] = {
            "shrink": gate.evidence.get("shrink"),
            "original_inputs": [i.get("shape") for i in cx.inputs],
            "shrunk_inputs": None if shrunk is None else [i.get("shape") for i in shrunk["inputs"]],
            "shrunk_values_kept": None
            if shrunk is None
            else sum(len(i.get("values", [])) for i in shrunk["inputs"]),
        }
    row["gates"] = gates
    row["shrink_seconds"] = round(
        sum((g["shrink"] or {}).get("seconds", 0.0) for g in gates.values()), 2
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--kernels", nargs="*", default=list(KERNELS))
    args = parser.parse_args()
    results = {}
    for kernel in args.kernels:
        results[kernel] = {
            "no_shrink": measure(kernel, None),
            "shrink": measure(kernel, ShrinkOptions()),
        }
        print(kernel, json.dumps(results[kernel]), flush=True)
    report = {
        "device": "cpu",
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "budget": {"max_calls": ShrinkOptions.max_calls, "max_seconds": ShrinkOptions.max_seconds},
        "kernels": results,
    }
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
