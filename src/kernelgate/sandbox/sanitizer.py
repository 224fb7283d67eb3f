"""compute-sanitizer runs for RES-01 (``kernelgate verify --sanitize``, device mode).

The candidate is loaded again in a worker started *through* compute-sanitizer, once per
tool (memcheck: out-of-bounds and misaligned accesses; racecheck: shared-memory hazards;
initcheck: reads of uninitialised device memory), and called on a few of the gate cases.
The sanitizer writes its report to a log file of ours; we parse its summary line
(``ERROR SUMMARY: N errors``) in the judge. A run that ends without a summary is reported
as inconclusive, never as clean.

The worker stays confined (sandbox/confine.py), less what the sanitizer itself needs: its
frontend runs outside the sandbox, in the judge's network namespace, and its injection in
each target process connects back to it over TCP. ``sanitizer_confinement`` finds, with a
trusted probe under the sanitizer (once per judge process and device), the strictest
confinement under which the sanitizer still instruments its target; every mechanism it
drops is reported missing in the run's ``isolation`` with the reason.

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
from kernelgate.sandbox import confine
from kernelgate.sandbox.session import PROBE, ExecutionIncident, WorkerSession
from kernelgate.serde import Serializable

TOOLS = ("memcheck", "racecheck", "initcheck")
_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error")
# racecheck reports hazards instead: "RACECHECK SUMMARY: 0 hazards displayed (0 errors, ...)".
_RACECHECK_SUMMARY = re.compile(r"RACECHECK SUMMARY:.*?\((\d+)\s+errors?")
SLOWDOWN = 20.0  # sanitized calls are this much slower at most, for timeouts
# compute-sanitizer's --port and --max-connections, passed explicitly: its targets connect
# to these ports, the only TCP a sanitized worker may open.
FRONTEND_PORT, FRONTEND_CONNECTIONS = 49152, 10
FRONTEND_PORTS = list(range(FRONTEND_PORT, FRONTEND_PORT + FRONTEND_CONNECTIONS))
PROBE_TIMEOUT_S = 120.0  # the sanitizer's own launch timeout is 60 s


@dataclass(frozen=True)
class SanitizerConfinement:
    """How a worker under compute-sanitizer is confined: ``skip`` as in confine.Policy
    (None: not confined at all), the sanitizer's ports open for connect, and why."""

    skip: tuple[str, ...] | None
    reason: str


NETWORK = "compute-sanitizer's frontend runs outside the sandbox and its targets connect to "
NETWORK += f"it over TCP (ports {FRONTEND_PORT}-{FRONTEND_PORTS[-1]})"
# The strictest first; the first under which a trusted probe is instrumented is used.
LEVELS = (
    SanitizerConfinement(("no-network",), NETWORK),
    SanitizerConfinement(
        ("no-network", "pid-namespace"), NETWORK + "; it loses track of targets in a PID namespace"
    ),
    SanitizerConfinement(
        ("no-network", "pid-namespace", "landlock-fs"),
        NETWORK + "; it does not instrument targets under Landlock",
    ),
    SanitizerConfinement(None, "compute-sanitizer instruments no confined target here"),
)
_CHOSEN: dict[tuple[str, str], SanitizerConfinement] = {}


@dataclass
class SanitizerRun(Serializable):
    """One tool's verdict on the candidate over the sanitized cases."""

    tool: str
    errors: int | None  # None: no summary (inconclusive)
    calls: int
    seconds: float
    report: str = ""  # the sanitizer's findings (head of its log)
    incidents: list[str] = field(default_factory=list)  # calls that did not return normally
    isolation: dict[str, Any] | None = None  # what confined the sanitized worker (confine.py)

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


def sanitized_session(
    tool: str,
    executable: str,
    log_path: Path,
    candidate: Path,
    init_inputs: list[Any],
    device: str,
    confinement: SanitizerConfinement,
    *,
    timeout: float,
    load_timeout: float,
) -> WorkerSession:
    """A worker session started through ``compute-sanitizer --tool TOOL``, confined as
    ``confinement`` says; its report goes to ``log_path`` (outside the sandbox)."""
    session = WorkerSession(
        candidate, init_inputs, device=device, timeout=timeout, load_timeout=load_timeout
    )
    session.wrapper = [
        executable,
        "--tool",
        tool,
        "--log-file",
        str(log_path),
        "--print-limit",
        "20",
        "--port",
        str(FRONTEND_PORT),
        "--max-connections",
        str(FRONTEND_CONNECTIONS),
    ]
    if confinement.skip is None:
        session.isolation_mode = "off"
    else:
        session.confine_skip = list(confinement.skip)
        session.confine_connect_ports = list(FRONTEND_PORTS)
    session.wrapper_probe = False  # the level was chosen with the probe already
    session.exit_grace = max(120.0, timeout)  # the sanitizer writes its summary at exit
    return session


def _instruments(executable: str, device: str, confinement: SanitizerConfinement) -> bool:
    """Whether the trusted probe loads under the sanitizer, so confined, and the sanitizer
    ends with its summary (a target it never instrumented gives none)."""
    with tempfile.TemporaryDirectory(prefix="kernelgate-sanitizer-probe-") as tmp:
        log_path = Path(tmp) / "sanitizer.log"
        session = sanitized_session(
            "memcheck",
            executable,
            log_path,
            PROBE,
            [],
            device,
            confinement,
            timeout=PROBE_TIMEOUT_S,
            load_timeout=PROBE_TIMEOUT_S,
        )
        try:
            with session:
                pass
        except CandidateLoadError:
            return False
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
    return parse_summary(log) is not None


def sanitizer_confinement(executable: str, device: str) -> SanitizerConfinement:
    """The strictest of ``LEVELS`` under which a trusted probe is instrumented here (found
    once per judge process); the strictest if none is, so the runs say inconclusive."""
    key = (executable, device)
    if key not in _CHOSEN:
        working = (c for c in LEVELS if _instruments(executable, device, c))
        _CHOSEN[key] = next(working, LEVELS[0])
    return _CHOSEN[key]


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
    confinement = sanitizer_confinement(executable, device)
    started = time.monotonic()
    incidents: list[str] = []
    calls = 0
    with tempfile.TemporaryDirectory(prefix="kernelgate-sanitizer-") as tmp:
        log_path = Path(tmp) / "sanitizer.log"
        session = sanitized_session(
            tool,
            executable,
            log_path,
            candidate,
            init_inputs,
            device,
            confinement,
            timeout=timeout * SLOWDOWN,
            load_timeout=max(600.0, timeout * SLOWDOWN),
        )
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
        isolation=sanitized_isolation(session.isolation, confinement),
    )


def sanitized_isolation(
    isolation: dict[str, Any] | None, confinement: SanitizerConfinement
) -> dict[str, Any] | None:
    """The worker's isolation report, each mechanism the sanitizer needed dropped saying
    why (the launcher only knows that the judge skipped it)."""
    if isolation is None:
        return None
    report = confine.Report.from_dict(isolation)
    dropped = set(confine.MECHANISMS if confinement.skip is None else confinement.skip)
    dropped.add("landlock-net")  # open to the frontend's ports
    for name, reason in list(report.missing.items()):
        if name in dropped:
            report.lack(name, f"{reason}: {confinement.reason}")
    return report.to_dict()


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
