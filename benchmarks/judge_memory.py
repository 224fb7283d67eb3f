"""Where a judge's memory goes, gate by gate: the peak of the judging process per gate.

Admission reserves ``BYTES_PER_ELEMENT`` per element a reference holds (audit/admission.py),
fitted to judges' device peaks; that figure, times the elements of the largest CUDA-L1
records, is what keeps judges from sharing a GPU. To lower it, the judge's own peak must
come down first, and this says which gate sets it. It runs one ``verify`` in this process
(the candidate in its worker, as always) on an elementwise reference of ``--elements`` input
elements, reads this process's resident high-water mark at every gate's start and end
(resetting it each time), and reports per gate the peak above the start, in bytes per element
the reference holds (input and output).

On the CPU the judge's tensors live in host memory, so the resident set is what they take;
the device path allocates the same tensors on the GPU (plus what the caching allocator keeps),
so the ranking of gates carries over, the absolute figures do not.

    PYTHONPATH=src python benchmarks/judge_memory.py [--elements 8388608] [--json OUT.json]
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
console = Console()

REFERENCE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn({rows}, {columns})]

def get_init_inputs():
    return []
"""
CANDIDATE = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.clamp_min(x, 0.0)
"""


def resident_bytes() -> int:
    """This process's resident memory now (bytes)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def high_water_mark() -> int:
    """The most resident memory this process held since the mark was last reset (bytes)."""
    status = Path("/proc/self/status").read_text()
    line = next(line for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def reset_high_water_mark() -> None:
    """Start the mark again from the memory held now (Linux 4.0+: ``clear_refs`` 5)."""
    Path("/proc/self/clear_refs").write_text("5")


class GatePeaks:
    """The resident set's peak while each gate runs, and between gates (``after X``): the
    kernel's high-water mark, read and reset at every gate's start and end, so no phase is
    missed however short it is, and no sampling thread competes with the judge."""

    def __init__(self) -> None:
        self.phase = "setup"
        self.peaks: dict[str, int] = {}

    def _close_phase(self) -> None:
        self.peaks[self.phase] = max(self.peaks.get(self.phase, 0), high_water_mark())
        reset_high_water_mark()

    def on_gate(self, gate: str, result: Any) -> None:
        self._close_phase()
        self.phase = gate if result is None else f"after {gate}"

    def __enter__(self) -> GatePeaks:
        try:
            reset_high_water_mark()
        except OSError as exc:
            raise typer.BadParameter(
                f"cannot reset this process's memory high-water mark ({exc}): the script "
                "needs Linux 4.0 or later with a writable /proc/self/clear_refs"
            ) from None
        return self

    def __exit__(self, *exc: object) -> None:
        self._close_phase()


def per_element(peaks: dict[str, int], start: int, elements: int) -> dict[str, float]:
    """Each phase's peak above ``start``, in bytes per element the reference holds."""
    return {phase: round((peak - start) / elements, 1) for phase, peak in peaks.items()}


@app.command()
def main(
    elements: Annotated[int, typer.Option(min=1024, help="input elements of the relu")] = 1 << 23,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """Run one CPU verify of relu at ``--elements`` and print each gate's memory peak."""
    import torch

    from kernelgate.pipeline import verify

    columns = 1 << 15 if elements >= 1 << 15 else elements
    rows = max(1, elements // columns)
    held = 2 * rows * columns  # input and output
    with tempfile.TemporaryDirectory() as tmp:
        reference, candidate = Path(tmp) / "reference.py", Path(tmp) / "candidate.py"
        reference.write_text(REFERENCE.format(rows=rows, columns=columns))
        candidate.write_text(CANDIDATE)
        start = resident_bytes()
        with GatePeaks() as peaks:
            started = time.monotonic()
            verdict = verify(reference, candidate, on_gate=peaks.on_gate)
            seconds = time.monotonic() - started
    figures = per_element(peaks.peaks, start, held)
    table = Table(
        title=f"relu over {rows} x {columns}: {held:,} elements held; {verdict.verdict.value}"
    )
    table.add_column("phase")
    table.add_column("peak MiB", justify="right")
    table.add_column("bytes / element above the start", justify="right")
    for phase, peak in peaks.peaks.items():
        table.add_row(phase, f"{peak / 2**20:.0f}", f"{figures[phase]:.1f}")
    console.print(table)
    if json_out is not None:
        report = {
            "schema": "kernelgate.judge-memory/1",
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores (CPU mode: host memory)",
            "torch": torch.__version__,
            "reference": f"relu over [{rows}, {columns}] float32",
            "elements_held": held,
            "verdict": verdict.verdict.value,
            "seconds": round(seconds, 1),
            "start_bytes": start,
            "peak_bytes": peaks.peaks,
            "bytes_per_element_above_start": figures,
        }
        json_out.write_text(json.dumps(report, indent=1) + "\n")
        console.print(f"written to {json_out}")


if __name__ == "__main__":
    app()
