"""compute-sanitizer runs for RES-01 (device mode): ``kernelgate verify --sanitize``, and
by default in device audits for every record whose candidate launched a kernel of its own.

The candidate is loaded again in a worker started *through* compute-sanitizer, once per
tool (memcheck: out-of-bounds and misaligned accesses; racecheck: shared-memory hazards;
initcheck: reads of uninitialised device memory; synccheck: invalid barrier use), and
called on a few of the gate cases. The sanitizer writes its report to a log file of ours;
we parse its summary line (``ERROR SUMMARY: N errors``) in the judge. A run that ends
without a summary is reported as inconclusive, never as clean; one that ran past its time
budget (``SanitizePolicy.seconds``, shared by the tools of one record) as out of budget.

Each error block of the report is attributed (``attribute_report``): to the candidate when
its device frame names one of the candidate's kernels (the authored kernels of AUTH-01's
profile) or a kernel no library is known to own, to a library when it names a library
kernel, to the host when it names no kernel (an API error). Only the candidate's fail
RES-01, and the report kept as evidence is trimmed to them: the candidate did not write the
library's kernels, and a library's own sanitizer noise must not reject its callers.

The worker stays confined (sandbox/confine.py), less what the sanitizer itself needs: its
frontend runs outside the sandbox, in the judge's network namespace, and its injection in
each target process connects back to it over TCP. ``sanitizer_confinement`` finds, with a
trusted probe under the sanitizer (once per judge process and device), the strictest
confinement under which the sanitizer still instruments its target; every mechanism it
drops is reported missing in the run's ``isolation`` with the reason.

PyTorch's caching allocator hands out pieces of large blocks, and memcheck knows only the
blocks: an overrun that stays inside one is invisible to it (NOTES.md). The sanitized
worker therefore runs with the caching allocator off (``SANITIZED_ENV``), so each tensor
the candidate allocates is an allocation of its own, with bounds memcheck checks. The
judge's own inputs keep MEM-01's guard bands, which MEM-01 checks.
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
from kernelgate.sandbox.sanitizer_outcomes import TOOLS
from kernelgate.sandbox.session import PROBE, ExecutionIncident, WorkerSession
from kernelgate.serde import Serializable

MIN_EXIT_GRACE_S = 30.0  # the sanitizer writes its summary as its target exits
# A run already out of budget: long enough for the sanitizer to flush the errors it found
# (findings count even then, ``run_status``), not to finish an instrumented call
OVER_BUDGET_EXIT_GRACE_S = 10.0
MAX_REPORT_CHARS = 6000

_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error")
# racecheck reports hazards instead: "RACECHECK SUMMARY: 0 hazards displayed (0 errors, ...)".
_RACECHECK_SUMMARY = re.compile(r"RACECHECK SUMMARY:.*?\((\d+)\s+errors?")
SLOWDOWN = 20.0  # sanitized calls are this much slower at most, for timeouts
# compute-sanitizer's --port and --max-connections, passed explicitly: its targets connect
# to these ports, the only TCP a sanitized worker may open.
FRONTEND_PORT, FRONTEND_CONNECTIONS = 49152, 10
FRONTEND_PORTS = list(range(FRONTEND_PORT, FRONTEND_PORT + FRONTEND_CONNECTIONS))
PROBE_TIMEOUT_S = 120.0  # the sanitizer's own launch timeout is 60 s
# set for the sanitized worker (through ``env`` ahead of the sanitizer in its command)
SANITIZED_ENV = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}


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


@dataclass(frozen=True)
class SanitizePolicy:
    """When RES-01 runs the sanitizer and for how long.

    ``when``: "always" (``verify --sanitize``: every candidate) or "authored" (device audits:
    only a candidate whose AUTH-01 profile shows a kernel of its own; a PyTorch-only one has
    nothing of its own for the sanitizer to judge, and each tool costs a worker start under
    instrumentation). ``seconds``: one budget for all ``tools`` of a record, each tool
    getting an equal share of what the ones before it left (None: only the per-call
    timeouts bound it, as ``verify --sanitize`` always had).
    """

    when: str = "always"
    seconds: float | None = None
    tools: tuple[str, ...] = TOOLS

    def __post_init__(self) -> None:
        if self.when not in ("always", "authored"):
            raise ValueError(f"unknown sanitize policy {self.when!r}")
        if self.seconds is not None and not self.seconds > 0:
            raise ValueError(f"a sanitizer budget is a positive time, not {self.seconds} s")
        unknown = set(self.tools) - set(TOOLS)
        if unknown:
            raise ValueError(f"unknown sanitizer tool(s) {sorted(unknown)}; known: {TOOLS}")


@dataclass
class SanitizerRun(Serializable):
    """One tool's verdict on the candidate over the sanitized cases.

    ``status``: "clean" (summary, no error, no incident), "findings" (an error in the
    candidate's kernels), "other-findings" (errors only in library kernels or host API
    calls), "inconclusive" (no summary, or a call that failed with no error reported),
    "out-of-budget" (ran past its share of the budget) or "not-run" (it could not start).
    """

    tool: str
    errors: int | None  # None: no summary (inconclusive); all errors, whoever's
    calls: int
    seconds: float
    report: str = ""  # the sanitizer's findings, trimmed to the candidate's kernels
    incidents: list[str] = field(default_factory=list)  # calls that did not return normally
    isolation: dict[str, Any] | None = None  # what confined the sanitized worker (confine.py)
    status: str = ""
    candidate_errors: int = 0  # error blocks attributed to the candidate's kernels
    other_errors: int = 0  # error blocks in library kernels or host API calls
    other_kernels: list[str] = field(default_factory=list)  # the library kernels named
    budget_s: float | None = None  # this tool's share of the record's budget
    why: str = ""  # for a run that did not run to its summary

    @property
    def clean(self) -> bool:
        return self.status == "clean"

    @property
    def found(self) -> bool:
        return self.status == "findings"


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
    like: WorkerSession | None = None,
) -> WorkerSession:
    """A worker session started through ``compute-sanitizer --tool TOOL``, confined as
    ``confinement`` says; its report goes to ``log_path`` (outside the sandbox).

    ``like``: the verification's main session. Its scratch folder is shared, so a torch
    extension built by the gates' workers is loaded, not built again under the sanitizer
    (minutes of a record's budget otherwise); its model class and weights (a problem
    folder's solution), forbidden names and the tuner's config carry over."""
    session = WorkerSession(
        candidate, init_inputs, device=device, timeout=timeout, load_timeout=load_timeout
    )
    if like is not None:
        session.scratch = like.scratch_folder()
        session.model_class = like.model_class
        session.weights = like.weights
        session.forbidden = like.forbidden
        session.knob_values = like.knob_values  # the tuner's config, as in every instance
        session.autotune_pins = like.autotune_pins
    session.wrapper = [
        shutil.which("env") or "/usr/bin/env",
        *(f"{name}={value}" for name, value in SANITIZED_ENV.items()),
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
    budget_s: float | None = None,
    kernels: KernelNames | None = None,
    like: WorkerSession | None = None,
) -> SanitizerRun:
    """Load the candidate under ``compute-sanitizer --tool TOOL`` and call it on ``cases``.

    ``budget_s``: wall seconds this tool may take (load, calls; the sanitizer's exit gets
    ``MIN_EXIT_GRACE_S`` on top, to write its summary), None: the per-call timeouts only.
    ``kernels``: whose kernels are whose, for ``attribute_report`` (None: every kernel-naming
    error counts as the candidate's). ``like``: the verification's main session, whose
    scratch folder (the candidate's builds, reused), model class and weights the sanitized
    worker takes.
    """
    confinement = sanitizer_confinement(executable, device)
    started = started_now()
    deadline = None if budget_s is None else started + budget_s

    def left(default: float) -> float:
        return default if deadline is None else max(1.0, min(default, deadline - started_now()))

    incidents: list[str] = []
    calls = 0
    over_budget = load_failed = False
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
            timeout=left(timeout * SLOWDOWN),
            load_timeout=left(max(600.0, timeout * SLOWDOWN)),
            like=like,
        )
        if deadline is not None:
            session.compile_timeout = left(session.compile_timeout)
            session.exit_grace = max(MIN_EXIT_GRACE_S, min(session.exit_grace, budget_s or 0.0))
        try:
            session.start()
            for inputs in cases:
                if deadline is not None and started_now() >= deadline:
                    over_budget = True
                    break
                session.timeout = left(timeout * SLOWDOWN)
                calls += 1
                try:
                    session.call(inputs, poison=poison, guard_bytes=guard_bytes)
                except ExecutionIncident as incident:
                    incidents.append(str(incident)[:500])
                    if incident.kind == "timeout":
                        over_budget = deadline is not None and started_now() >= deadline - 1.0
                        break
        except CandidateLoadError as exc:
            load_failed = True
            over_budget = deadline is not None and started_now() >= deadline - 1.0
            incidents.append(f"load under the sanitizer failed: {exc}"[:500])
        finally:
            if over_budget:
                # no summary can make it count now: waiting its whole exit grace for one cost
                # initcheck as much again as its share (CUDA-L1 h100 on an H100: 150 s for a
                # 75 s share, on every record it ran)
                session.exit_grace = min(session.exit_grace, OVER_BUDGET_EXIT_GRACE_S)
            session.__exit__(None, None, None)  # the worker exits; the sanitizer writes its summary
        log = log_path.read_text(errors="replace") if log_path.exists() else ""
    errors = parse_summary(log)
    attributed = attribute_report(log, kernels)
    run = SanitizerRun(
        tool=tool,
        errors=errors,
        calls=calls,
        seconds=round(started_now() - started, 2),
        report=attributed.report,
        incidents=incidents,
        isolation=sanitized_isolation(session.isolation, confinement),
        candidate_errors=attributed.candidate,
        other_errors=attributed.other,
        other_kernels=attributed.other_kernels,
        budget_s=None if budget_s is None else round(budget_s, 2),
    )
    run.status, run.why = run_status(run, over_budget=over_budget, load_failed=load_failed)
    return run


def started_now() -> float:
    """The clock budgets are kept on (a name of its own, so tests can move it)."""
    return time.monotonic()


def run_status(run: SanitizerRun, *, over_budget: bool, load_failed: bool) -> tuple[str, str]:
    """``SanitizerRun.status`` and, for a run that did not reach its summary, why.

    Errors in the candidate's kernels are findings even when the run then ran out of time
    or crashed (memcheck stops a faulting kernel; the call that launched it fails). A run
    with no summary is never clean: out of budget when it used its share, else inconclusive.
    """
    if run.candidate_errors:
        return "findings", ""
    if over_budget:
        return "out-of-budget", f"ran past its budget of {run.budget_s:g} s"
    if load_failed and run.errors is None:
        return "not-run", run.incidents[0] if run.incidents else "load failed"
    if run.errors is None:
        return "inconclusive", "compute-sanitizer wrote no summary"
    if run.errors and run.other_errors:
        return "other-findings", ""
    if run.errors:  # counted in the summary, none of its blocks shown (--print-limit)
        return "findings", ""
    if run.incidents:
        return "inconclusive", f"a call did not return normally: {run.incidents[0][:200]}"
    return "clean", ""


@dataclass(frozen=True)
class KernelNames:
    """Base names (``unqualified_parts``' last part) of the kernels AUTH-01's profile saw:
    the candidate's own and the libraries'."""

    authored: frozenset[str]
    library: frozenset[str] = frozenset()

    @classmethod
    def from_authorship(cls, evidence: dict[str, Any] | None) -> KernelNames:
        from kernelgate.sandbox.authorship import unqualified_parts

        authored: set[str] = set()
        library: set[str] = set()
        for kernel in (evidence or {}).get("kernels", []):
            parts = unqualified_parts(str(kernel.get("name", "")))
            if parts:
                (authored if kernel.get("authored") else library).add(parts[-1])
        return cls(frozenset(authored), frozenset(library - authored))


@dataclass
class AttributedReport:
    report: str  # the candidate's error blocks and the summary lines
    candidate: int  # error blocks attributed to the candidate
    other: int  # error blocks in library kernels or host calls
    other_kernels: list[str]


_PREFIX = "========="
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# a device frame: "    at k(float *, int)+0x70 in k.cu:12", racecheck's "Write access at ..."
# and a device call stack's "Device Frame:f(...)" lines
_DEVICE_FRAME = re.compile(r"^=+\s+at\s+|\baccess at\s+|Device Frame:\s*")
# launched by PyTorch, whoever called it; not cub, cutlass or cute, whose device functions
# run inside the candidate's own kernels
_PYTORCH_NAMESPACES = ("at::", "c10::", "torch::")
_HOST_FRAME = re.compile(r"Host Frame|^=+\s+in\s|Saved host backtrace")
_HEADERS = ("COMPUTE-SANITIZER", "ERROR SUMMARY", "RACECHECK SUMMARY", "LEAK SUMMARY")


def error_blocks(log: str) -> tuple[list[list[str]], list[str]]:
    """The report's error blocks (each a list of lines: its message, then its indented
    details) and its summary lines. A block starts at a line with one space after the
    ``=========`` prefix and ends at the next such line or at an empty one."""
    blocks: list[list[str]] = []
    summaries: list[str] = []
    current: list[str] | None = None
    for line in log.splitlines():
        if not line.startswith(_PREFIX):
            current = None  # the target's own output, if any: not the sanitizer's
            continue
        body = line[len(_PREFIX) :]
        if not body.strip():
            current = None
        elif any(body.strip().startswith(h) for h in _HEADERS):
            current = None
            if "SUMMARY" in body:
                summaries.append(line)
        elif body.startswith(" ") and not body.startswith("  "):
            current = [line]
            blocks.append(current)
        elif current is not None:
            current.append(line)
    return blocks, summaries


def attribute_report(log: str, kernels: KernelNames | None) -> AttributedReport:
    """The report's error blocks sorted into the candidate's and the others' (see the
    module doc), and the report trimmed to the candidate's blocks without host backtraces.

    A block's kernel is read from its device frames (``at k(float*, int)+0x70 in k.cu:12``,
    older ``at 0x70 in k(float*, int)``, racecheck's ``Write access at ...``): the
    identifiers there, matched against the profile's base names (a library kernel is one the
    profile saw launched and did not attribute, or a PyTorch one: a cub or cutlass device
    function runs inside whoever's kernel called it). A block whose device frames name no
    known kernel is the candidate's (the same candidate at the same shape launched
    it; erring towards failure); one with no device frame is a host API error.
    """
    blocks, summaries = error_blocks(log)
    mine: list[list[str]] = []
    other = 0
    other_kernels: list[str] = []
    for block in blocks:
        frames = [_DEVICE_FRAME.split(ln, 1)[-1] for ln in block if _DEVICE_FRAME.search(ln)]
        words = {w for frame in frames for w in _IDENTIFIER.findall(frame)}
        if not frames:
            owner = "host"
        elif kernels is None or words & kernels.authored:
            owner = "candidate"
        elif words & kernels.library or any(
            ns in frame for ns in _PYTORCH_NAMESPACES for frame in frames
        ):
            owner = "library"
            other_kernels += sorted(words & kernels.library)[:2]
        else:
            owner = "candidate"  # a kernel the profile did not see: erring towards failure
        if owner == "candidate":
            mine.append(block)
        else:
            other += 1
    kept: list[str] = []
    for block in mine:
        kept += [ln for ln in block if not _HOST_FRAME.search(ln)]
        kept.append(_PREFIX)
    report = "\n".join(kept + summaries)
    if other:
        report += f"\n({other} error block(s) outside the candidate's kernels not shown)"
    return AttributedReport(
        report=report[:MAX_REPORT_CHARS],
        candidate=len(mine),
        other=other,
        other_kernels=list(dict.fromkeys(other_kernels))[:8],
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
    budget_s: float | None = None,
    kernels: KernelNames | None = None,
    like: WorkerSession | None = None,
) -> tuple[list[SanitizerRun], str]:
    """Every tool's run, or ``([], why)`` when the sanitizer cannot run here.

    ``budget_s`` is shared by the tools: each gets what the ones before it left, divided by
    the tools still to run (a tool that finishes early leaves its time to the next). The
    one-off probe that chooses the confinement (``sanitizer_confinement``) is not charged to
    the budget. ``kernels`` and ``like``: see ``run_tool``.
    """
    if device == "cpu":
        return [], "compute-sanitizer not run: CPU mode (it needs a CUDA device)"
    executable = find_compute_sanitizer()
    if executable is None:
        return [], "compute-sanitizer not run: not found (PATH, CUDA_HOME, /usr/local/cuda)"
    sanitizer_confinement(executable, device)  # the probe, once per judge process
    runs: list[SanitizerRun] = []
    started = started_now()
    for index, tool in enumerate(tools):
        share = None
        if budget_s is not None:
            left = budget_s - (started_now() - started)
            share = left / (len(tools) - index)
            if share < 1.0:
                runs.append(
                    SanitizerRun(
                        tool=tool,
                        errors=None,
                        calls=0,
                        seconds=0.0,
                        status="out-of-budget",
                        budget_s=round(max(share, 0.0), 2),
                        why=f"the record's budget of {budget_s:g} s was spent by the tools "
                        "before it",
                    )
                )
                continue
        runs.append(
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
                budget_s=share,
                kernels=kernels,
                like=like,
            )
        )
    return runs, ""
