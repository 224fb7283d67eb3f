"""``kernelgate bench``: the perf layer with or without the gates before it, and its table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from kernelgate.contract.derive import contract_for
from kernelgate.errors import KernelgateError
from kernelgate.formats.kernelbench import candidate_backend, check_candidate_source, load_reference
from kernelgate.gates.base import GateContext
from kernelgate.oracle.fp64 import Oracle
from kernelgate.perf.measure import PerfOptions, PerfReport, PerfRun

NOT_JUDGED = "not judged"  # the verdict a measurement without gates rests on: none


def perf_without_gates(
    reference: str | Path,
    candidate: str | Path,
    *,
    device: str = "cpu",
    options: PerfOptions | None = None,
    timeout: float = 60.0,
    seed: int = 0,
) -> PerfReport:
    """Time ``candidate`` against ``reference`` without judging it first (``bench
    --no-gates``): the sampled outputs are still checked, but with no verdict the report
    never calls its speedup verified. For quick measurements and the protocol's tests."""
    from kernelgate.pipeline import resolve_device, spawned_worker

    device = resolve_device(device)
    program = load_reference(reference)
    if candidate_backend(check_candidate_source(candidate)) == "cuda" and device == "cpu":
        raise KernelgateError(f"candidate {candidate} is a CUDA C++ extension and needs a GPU")
    session = spawned_worker(candidate, device=device, timeout=timeout)
    session.init_inputs = program.init_inputs()
    try:
        contract = contract_for(program)
        oracle = Oracle(program, torch.device(device))
    except BaseException:
        session.close()
        raise
    with session:
        ctx = GateContext(contract=contract, oracle=oracle, session=session, seed=seed, replay=[])
        ctx.gate_id = "PERF"
        run = PerfRun(ctx, Path(reference), options or PerfOptions(), outcome=NOT_JUDGED)
        return run.run(contract)


def _ms(timing: dict[str, Any] | None) -> str:
    return "-" if timing is None else f"{timing['median_ms']:.4g}"


def _x(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}x"


def perf_rows(report: dict[str, Any]) -> list[list[str]]:
    """One row per shape: judged medians and speedup, KernelBench's beside them, outputs."""
    rows = []
    for shape in report.get("shapes", []):
        checked = "ok" if shape["outputs_ok"] else "; ".join(shape["problems"])[:200]
        rows.append(
            [
                shape["label"],
                _ms(shape["reference"]),
                _ms(shape["candidate"]),
                _x(shape["speedup"]),
                _ms(shape["kernelbench_reference"]),
                _ms(shape["kernelbench_candidate"]),
                _x(shape["kernelbench_speedup"]),
                checked,
            ]
        )
    return rows


PERF_COLUMNS = (
    "shape",
    "ref ms",
    "cand ms",
    "speedup",
    "KB ref ms",
    "KB cand ms",
    "KB speedup",
    "sampled outputs",
)


def perf_summary(report: dict[str, Any]) -> str:
    """The line a reader takes away: the verified speedup, or why there is none."""
    clock = report.get("clock", "")
    label = " (CPU-interpreter timing)" if clock == "cpu-perf-counter" else ""
    if report.get("verified_speedup") is not None:
        return (
            f"verified speedup {report['verified_speedup']:.3g}x{label} "
            f"(KernelBench's method: {_x(report.get('kernelbench_speedup'))})"
        )
    return (
        f"no verified speedup{label}: {report.get('not_verified_because', '')} "
        f"(measured {_x(report.get('speedup'))}; KernelBench's method "
        f"{_x(report.get('kernelbench_speedup'))})"
    )
