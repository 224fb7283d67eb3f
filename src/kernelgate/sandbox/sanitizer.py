"""compute-sanitizer runs for RES-01 (``kernelgate verify --sanitize``, device mode).

The candidate is loaded again in a worker started *through* compute-sanitizer, once per
tool (memcheck: out-of-bounds and misaligned accesses; racecheck: shared-memory hazards;
initcheck: reads of uninitialised device memory), and called on a few of the gate cases.
The sanitizer writes its report to a log file of ours; we parse its summary line
(``ERROR SUMMARY: N errors``) in the judge. A run that ends without a summary is reported
as inconclusive, never as clean.

Known blind spot (NOTES.md): memcheck does not see a small overrun that stays inside the
caching allocator's rounded block; MEM-01's guard bands and poison cover those.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelgate.errors import CandidateLoadError
from kernelgate.sandbox.session import ExecutionIncident, WorkerSession
from kernelgate.serde import Serializable

TOOLS = ("memcheck", "racecheck", "initcheck")
_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error")
# racecheck reports hazards instead: "RACECHECK SUMMARY: 0 hazards displayed (0 errors, ...)".
_RACECHECK_SUMMARY = re.compile(r"RACECHECK SUMMARY:.*?\((\d+)\s+errors?")
SLOWDOWN = 20.0  # sanitized calls are this much slower at most, for timeouts


@dataclass
class SanitizerRun(Serializable):
    """One tool's verdict on the candidate over the sanitized cases."""

    tool: str
    errors: int | None  # None: no summary (inconclusive)
    calls: int
    seconds: float
    report: str = ""  # the sanitizer's findings (head of its log)
    incidents: list[str] = field(default_factory=list)  # calls that did not return normally

    @property
    def clean(self) -> bool:
        return self.errors == 0 and not self.incidents

    @property
    def found(self) -> bool:
        return bool(self.errors)


def find_compute_sanitizer() -> str | None:
    """compute-sanitizer on PATH, under CUDA_HOME, or in the usual toolkit places."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    roots = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", "/opt/cuda"]
    for root in roots:
        for sub in ("bin", "compute-sanitizer"):
            path = Path(root) / sub / "compute-sanitizer" if root else None
            if path is not None and path.is_file() and os.access(path, os.X_OK):
                return str(path)
    return None


def parse_summary(log: str) -> int | None:
    """Total errors from the sanitizer's summary lines (``ERROR SUMMARY``, or racecheck's
    ``RACECHECK SUMMARY``); None when there is none."""
    counts = [int(n) for n in _SUMMARY.findall(log) + _RACECHECK_SUMMARY.findall(log)]
    return sum(counts) if counts else None


def run_tool(
    tool: str,
    executable: str,
    candidate: Path,
    init_inputs: list[Any],
    device: str,
    cases: list[list[Any]],
    *,
    poison: int,
    guard_bytes: int,
    timeout: float,
) -> SanitizerRun:
    """Load the candidate under ``compute-sanitizer --tool TOOL`` and call it on ``cases``."""
    started = time.monotonic()
    incidents: list[str] = []
    calls = 0
    with tempfile.TemporaryDirectory(prefix="kernelgate-sanitizer-") as tmp:
        log_path = Path(tmp) / "sanitizer.log"
        session = WorkerSession(
            candidate,
            init_inputs,
            device=device,
            timeout=timeout * SLOWDOWN,
            load_timeout=max(600.0, timeout * SLOWDOWN),
        )
        session.wrapper = [
            executable,
            "--tool",
            tool,
            "--log-file",
            str(log_path),
            "--print-limit",
            "20",
        ]
        session.exit_grace = max(120.0, timeout * SLOWDOWN)
        try:
            session.start()
            for inputs in cases:
                calls += 1
                try:
                    session.call(inputs, poison=poison, guard_bytes=guard_bytes)
                except ExecutionIncident as incident:
                    incidents.append(str(incident)[:500])
                    if incident.kind == "timeout":
                        break
        except CandidateLoadError as exc:
            incidents.append(f"load under the sanitizer failed: {exc}"[:500])
        finally:
            session.__exit__(None, None, None)  # the worker exits; the sanitizer writes its summary
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
    return SanitizerRun(
        tool=tool,
        errors=parse_summary(log),
        calls=calls,
        seconds=round(time.monotonic() - started, 2),
        report=log[:6000],
        incidents=incidents,
    )


def sanitize_candidate(
    candidate: Path,
    init_inputs: list[Any],
    device: str,
    cases: list[list[Any]],
    *,
    poison: int,
    guard_bytes: int,
    timeout: float,
    tools: tuple[str, ...] = TOOLS,
) -> tuple[list[SanitizerRun], str]:
    """Every tool's run, or ``([], why)`` when the sanitizer cannot run here."""
    if device == "cpu":
        return [], "compute-sanitizer not run: CPU mode (it needs a CUDA device)"
    executable = find_compute_sanitizer()
    if executable is None:
        return [], "compute-sanitizer not run: not found (PATH, CUDA_HOME, /usr/local/cuda)"
    runs = [
        run_tool(
            tool,
            executable,
            candidate,
            init_inputs,
            device,
            cases,
            poison=poison,
            guard_bytes=guard_bytes,
            timeout=timeout,
        )
        for tool in tools
    ]
    return runs, ""
