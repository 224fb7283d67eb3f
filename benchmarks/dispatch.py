"""What the dispatch guard costs per call (issue 23, part 3: at most 3 us on the H200).

The guard's price is host time: a few tensor attribute reads and integer comparisons
before the candidate is called. To see it alone, both sides are trivial modules that
return their first input (no kernel launch, nothing to wait for), and each case times

- ``check_ns``: ``CompiledDomain.admits(args, {})`` alone (the guard's own check);
- ``explain_ns``: ``CompiledDomain.reason(args)``, the general check that says why;
- ``direct_ns``: calling the candidate module itself;
- ``guarded_ns``: calling the guard, which checks and then calls the candidate;
- ``overhead_ns``: ``guarded_ns - direct_ns``, what a caller pays for the guard.

Each figure is per call, the fastest of ``--repeats`` rounds of ``--calls`` calls, the
rounds of the four measures interleaved (a shared host's busy spells then disturb them
alike).
Cases: one contiguous input (the common case, softmax's contract), the same input
transposed (strides read), two inputs (the aliasing check), an input outside the domain
(the reference answers), and a contract with a value check (finite only: a reduction and
a synchronisation per call, the price of not passing ``trust_values``).

    PYTHONPATH=src .venv/bin/python benchmarks/dispatch.py                  # CPU
    PYTHONPATH=src python benchmarks/dispatch.py --device cuda               # on the H200

writes benchmarks/results/dispatch-<label>.json (label: cpu, or the GPU's name: h200).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from kernelgate.contract.spec import (
    Contract,
    Dim,
    Layout,
    OutputSpec,
    Postcondition,
    TensorSpec,
    ValueDomain,
)
from kernelgate.dispatch import CompiledDomain, GuardedModule

RESULTS = Path(__file__).resolve().parent / "results"
BUDGET_NS = 3000  # the bound on the guard's overhead per call


class FirstInput(torch.nn.Module):
    """A stand-in kernel that does no work, so only the guard's own cost is timed."""

    def forward(self, *args: Any) -> Any:
        return args[0]


def contract(inputs: int, values: ValueDomain = ValueDomain.IEEE) -> Contract:
    """Softmax-like: (M, N) float32/16/bf16 inputs, every layout but broadcasts admitted."""
    layouts = [Layout.CONTIGUOUS, Layout.OFFSET, Layout.STRIDED, Layout.TRANSPOSED]
    return Contract(
        name=f"bench{inputs}",
        dims=[Dim("M", 30, min=1, max=None), Dim("N", 1000, min=1, max=1 << 24)],
        inputs=[
            TensorSpec(f"arg{i}", ["M", "N"], ["float32", "float16", "bfloat16"], layouts, values)
            for i in range(inputs)
        ],
        outputs=[OutputSpec("out0", ["M", "N"], "float32")],
        postcondition=Postcondition(reference="bench"),
    )


def per_call_ns(calls: int, repeats: int, **timed: Callable[[], Any]) -> dict[str, float]:
    """Per call, in nanoseconds, for each of ``timed``: the fastest of ``repeats`` rounds of
    ``calls`` calls, the rounds of all of them interleaved, so that a busy spell on the
    host slows every measure alike instead of one (the least disturbed round is the
    measure of what the code costs, as ``timeit`` advises)."""
    for call in timed.values():  # warm caches and any lazy initialisation
        for _ in range(min(calls, 1000)):
            call()
    best = dict.fromkeys(timed, math.inf)
    for _ in range(repeats):
        for name, call in timed.items():
            start = time.perf_counter_ns()
            for _ in range(calls):
                call()
            best[name] = min(best[name], (time.perf_counter_ns() - start) / calls)
    return best


def measure(
    name: str, spec: Contract, args: list[Any], device: str, calls: int, repeats: int
) -> dict[str, Any]:
    domain = CompiledDomain(spec, device)
    candidate = FirstInput()
    guard = GuardedModule(FirstInput(), candidate, domain, "verified")
    route = "candidate" if domain.admits(args, {}) else "reference"
    arguments = tuple(args)
    ns = per_call_ns(
        calls,
        repeats,
        check=lambda: domain.admits(arguments, {}),
        explain=lambda: domain.reason(arguments),
        direct=lambda: candidate(*arguments),
        guarded=lambda: guard(*arguments),
    )
    overhead = ns["guarded"] - ns["direct"]
    row = {
        "case": name,
        "route": route,
        **{f"{key}_ns": round(value, 1) for key, value in ns.items()},
        "overhead_ns": round(overhead, 1),
        "within_budget": overhead <= BUDGET_NS,
    }
    print(
        f"{name:28s} -> {route:9s} check {ns['check']:7.0f} ns  direct {ns['direct']:7.0f} ns  "
        f"guarded {ns['guarded']:7.0f} ns  overhead {overhead:7.0f} ns",
        flush=True,
    )
    return row


def environment(device: str) -> dict[str, Any]:
    import triton

    env: dict[str, Any] = {
        "device": device,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    if device.startswith("cuda"):
        env["gpu"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
    return env


def label_for(device: str) -> str:
    """``cpu``, or the GPU's model in lower case (``NVIDIA H200`` -> ``h200``)."""
    if not device.startswith("cuda"):
        return "cpu"
    return torch.cuda.get_device_name().split()[-1].lower()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--out", type=Path, default=None, help="default: results/dispatch-<label>.json"
    )
    options = parser.parse_args(argv)
    device = options.device
    x = torch.randn(30, 1000, device=device)
    y = torch.randn(30, 1000, device=device)
    cases = [
        ("one input, contiguous", contract(1), [x]),
        ("one input, transposed", contract(1), [torch.randn(1000, 30, device=device).t()]),
        ("two inputs, contiguous", contract(2), [x, y]),
        ("outside: float64", contract(1), [x.double()]),
        ("value check: finite only", contract(1, ValueDomain.FINITE), [x]),
    ]
    rows = [measure(n, c, a, device, options.calls, options.repeats) for n, c, a in cases]
    in_domain = [r for r in rows if r["route"] == "candidate" and "value" not in r["case"]]
    report = {
        "benchmark": "dispatch guard overhead per call",
        "budget_ns": BUDGET_NS,
        "environment": environment(device),
        "calls": options.calls,
        "repeats": options.repeats,
        "cases": rows,
        "worst_structural_overhead_ns": max(r["overhead_ns"] for r in in_domain),
        "within_budget": all(r["within_budget"] for r in in_domain),
        "note": "value checks (finite only, ranges) synchronise per call and are not part of "
        "the budget; trust_values=True skips them",
    }
    out = options.out or RESULTS / f"dispatch-{label_for(device)}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(
        f"worst overhead in the domain: {report['worst_structural_overhead_ns']:.0f} ns "
        f"(budget {BUDGET_NS} ns); written to {out}"
    )
    return 0 if report["within_budget"] else 1


if __name__ == "__main__":
    sys.exit(main())
