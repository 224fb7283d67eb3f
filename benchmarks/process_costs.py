"""Where a CPU verification's CPU time goes: process start-ups against judging.

The CPU test suite is bounded by CPU seconds, not wall time (two cores, many tests), and most
tests start processes: a candidate worker (the confinement launcher, then a Python that
imports torch and, for a Triton candidate, Triton), a CLI judge, an audit's old check. This
measures CPU seconds of a whole process tree with ``perf stat -e task-clock`` (which
follows every descendant, confined workers in their own namespaces included; ``getrusage``
misses the workers that are reaped by a thread or left to their launcher):

- ``python_imports_torch``: a bare ``python -c "import torch"``, the floor of any process
  that imports torch;
- ``worker_start_load_close``: one ``WorkerSession`` started, the candidate loaded (no
  call), closed: what each worker start costs before it judges anything; a fresh worker
  (``KERNELGATE_WORKER_FORK=0``, as every worker was before the fork server);
- ``forked_worker_start_load_close``: the same for a worker forked by the worker fork
  server (sandbox/forkserver.py): ``FORKED`` workers after a warm-up (the server's imports
  and a first, fresh, worker), less that warm-up (``forkserver_warm_up``), per worker;
- ``forkserver_warm_up``: a judge process's first worker with the server: the server's
  imports, then the worker forked;
- ``cli_verify_only``: ``kernelgate verify`` of the softmax example, ``--only CMP-01``, in a
  process of its own (the CLI tests' and hostile attacks' unit of work);
- ``in_process_verify_only``: the same verification through ``kernelgate.verify``, judge and
  workers together.

The last two but one run in a fresh ``python benchmarks/process_costs.py --one NAME``; the
CPU of that process doing nothing (``baseline``: its imports) is subtracted.

    PYTHONPATH=src .venv/bin/python benchmarks/process_costs.py [--repeat 3]

Each figure is the median over ``--repeat`` runs; on a shared, busy machine CPU seconds vary
far less than wall time, which is why they are what is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = ROOT / "examples" / "softmax"
if "TRITON_INTERPRET" not in os.environ:
    os.environ["TRITON_INTERPRET"] = "1"  # before any Triton kernel is defined (CPU mode)


def tree_cpu_seconds(command: list[str], env: dict[str, str] | None = None) -> float:
    """CPU seconds (task-clock) of ``command`` and all its descendants."""
    perf = ["perf", "stat", "-x", ",", "-e", "task-clock", "-o", "/dev/stderr", "--"]
    result = subprocess.run(perf + command, capture_output=True, text=True, check=False, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    line = next(
        x for x in result.stderr.splitlines() if x.endswith(",task-clock,") or ",task-clock," in x
    )
    return float(line.split(",")[0]) / 1000.0


FORKED = 5  # forked workers measured after the warm-up


def worker_start_load_close() -> None:
    from kernelgate.sandbox.session import WorkerSession

    with WorkerSession(SOFTMAX / "honest.py", [], timeout=120):  # entering loads it
        pass


def forkserver_warm_up() -> None:
    from kernelgate.sandbox import forkserver

    worker_start_load_close()  # starts the server, waits for it, forks the first worker
    server = forkserver._current
    assert server is not None and server.ready(), "the worker fork server did not start"


def forked_worker_start_load_close() -> None:
    from kernelgate.audit.zygote import ForkedJudge
    from kernelgate.sandbox.session import WorkerSession

    forkserver_warm_up()
    for _ in range(FORKED):
        with WorkerSession(SOFTMAX / "honest.py", [], timeout=120) as session:
            assert isinstance(session._process, ForkedJudge), "not forked"


def in_process_verify_only() -> None:
    from kernelgate.pipeline import verify

    verdict = verify(SOFTMAX / "reference.py", SOFTMAX / "honest.py", only=["CMP-01"])
    assert verdict.verdict.value == "verified", verdict.verdict


def baseline() -> None:
    """Nothing: the imports every ``--one`` process pays."""
    from kernelgate.sandbox.session import WorkerSession  # noqa: F401


IN_PROCESS: dict[str, Callable[[], None]] = {
    "baseline": baseline,
    "worker_start_load_close": worker_start_load_close,
    "forkserver_warm_up": forkserver_warm_up,
    "forked_worker_start_load_close": forked_worker_start_load_close,
    "in_process_verify_only": in_process_verify_only,
}
SELF = [sys.executable, str(Path(__file__).resolve()), "--one"]
COMMANDS: dict[str, list[str]] = {
    "python_imports_torch": [sys.executable, "-c", "import torch"],
    "baseline": [*SELF, "baseline"],
    "worker_start_load_close": [*SELF, "worker_start_load_close"],
    "forkserver_warm_up": [*SELF, "forkserver_warm_up"],
    "forked_worker_start_load_close": [*SELF, "forked_worker_start_load_close"],
    "cli_verify_only": [
        *[sys.executable, "-m", "kernelgate.cli", "verify"],
        *[str(SOFTMAX / "reference.py"), str(SOFTMAX / "honest.py"), "--only", "CMP-01"],
    ],
    "in_process_verify_only": [*SELF, "in_process_verify_only"],
}
LESS_BASELINE = ("worker_start_load_close", "forkserver_warm_up", "in_process_verify_only")
FRESH_ONLY = ("worker_start_load_close",)  # measured with the fork server switched off


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default=",".join(COMMANDS), help="comma-separated measures")
    parser.add_argument("--one", choices=list(IN_PROCESS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        IN_PROCESS[args.one]()
        return
    names = args.only.split(",")
    if "forked_worker_start_load_close" in names and "forkserver_warm_up" not in names:
        names.insert(0, "forkserver_warm_up")
    if any(n in LESS_BASELINE for n in names) and "baseline" not in names:
        names.insert(0, "baseline")
    results: dict[str, float] = {}
    for name in names:
        env = {**os.environ, "KERNELGATE_WORKER_FORK": "0"} if name in FRESH_ONLY else None
        results[name] = statistics.median(
            tree_cpu_seconds(COMMANDS[name], env) for _ in range(args.repeat)
        )
        if name in LESS_BASELINE:
            results[name] -= results["baseline"]
        if name == "forked_worker_start_load_close":
            results[name] = (results[name] - results["forkserver_warm_up"]) / FORKED
        results[name] = round(results[name], 2)
        print(f"{name}: {results[name]} CPU s", file=sys.stderr, flush=True)
    print(json.dumps({"repeat": args.repeat, "load": os.getloadavg(), "cpu_s": results}))


if __name__ == "__main__":
    main()
