"""Calibration: run every red-team kernel and control through ``kernelgate.verify``.

The result is a confusion matrix (defect rejected by an intended gate / rejected only by
another gate / passed), per-gate catch counts, each error model's separation margin and
the time per kernel. Verifications are independent, so each runs in a fresh child process of
its own (``python -m kernelgate.redteam.child``), ``jobs`` at a time, started and waited for
by threads of this process: a child past the entry limit is killed with its whole tree and
its entry gets an error row, a child that crashes gets one with the tail of its output, and
the other entries go on. (A ``spawn`` process pool, used before, stalled on a device with
entries still queued, and one entry that never finished held the calibration for ever.)
Every candidate still runs in its own sandbox worker under ``verify``. A CPU calibration
with one job may run in this process instead (the tests' per-entry calibrations).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelgate.redteam.catalog import Entry, entries
from kernelgate.sandbox.authorship import DEFAULT_MIN_AUTHORED_SHARE

CAUGHT = "rejected by an intended gate"
OTHER_GATE = "rejected only by another gate"
PASSED = "passed"
DEVICE_ONLY = "device-only"
# Only the interpreter's access trace sees it (RES-01 in CPU mode): on a device the access
# stays inside memory the judge owns and poisoned, where no device tool reports it.
CPU_ONLY = "cpu-only"
NOT_RUN = (DEVICE_ONLY, CPU_ONLY)  # entries this kind of machine cannot judge
ERROR = "harness error"
REASON_CHARS = 300  # of each failing gate's reason kept in a result
# Wall-clock seconds one entry's child may take, all of its verification included: past it
# the child and everything it started are killed and the entry gets an error row. Generous
# (the slowest entries take ~40 s on 2 CPU cores, ~30 s on an H200) because a row lost to
# it is a row not judged.
ENTRY_TIMEOUT = 600.0
OUTPUT_TAIL_CHARS = 1500  # of a crashed child's output kept in its error row
# The rules an entry can put in force, as verify's keyword arguments (catalog.Entry): the
# defaults a kernel-writing format would get (sandbox/authorship.py).
RULE_OPTIONS: dict[str, dict[str, Any]] = {
    "AUTH-01": {"min_authored_share": DEFAULT_MIN_AUTHORED_SHARE},
}


@dataclass
class EntryResult:
    """What one verification of one catalog entry gave."""

    name: str
    control: bool
    intended_gates: list[str]  # and the rules (AUTH-01) a defect names as its catchers
    verdict: str  # verified / rejected / narrowed, or "device-only" / "error"
    rejected_by: list[str] = field(default_factory=list)  # failed gates, then failed rules
    # why each gate or rule in ``rejected_by`` failed: a rejected control is a finding
    failure_reasons: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    ratios: list[dict[str, Any]] = field(default_factory=list)  # thresholded gates' evidence
    seconds: float = 0.0
    detail: str = ""  # device-only reason or harness error
    authored_share: float | None = None  # AUTH-01's measure (sandbox/authorship.py)

    @property
    def outcome(self) -> str:
        if self.verdict in NOT_RUN:
            return self.verdict
        if self.verdict == "error":
            return ERROR
        if self.control:
            return PASSED if not self.rejected_by else "rejected"
        if set(self.rejected_by) & set(self.intended_gates):
            return CAUGHT
        return OTHER_GATE if self.rejected_by else PASSED

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"name": self.name, "verdict": self.verdict}
        if not self.control:
            data["intended_gates"] = self.intended_gates
        data |= {
            "rejected_by": self.rejected_by,
            "failure_reasons": self.failure_reasons,
            "outcome": self.outcome,
            "seconds": self.seconds,
            "skipped": self.skipped,
            "error_over_bound": self.ratios,
            "authored_share": self.authored_share,
        }
        if self.detail:
            data["detail"] = self.detail
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EntryResult:
        """The result ``to_dict`` wrote (how an entry's child hands its row back).

        A control is the row without ``intended_gates``: ``to_dict`` leaves them out for a
        control and a defect always names at least one (catalog test). ``outcome`` is
        derived, so it is read back from the other fields, not from the dict."""
        control = "intended_gates" not in data
        return cls(
            name=data["name"],
            control=control,
            intended_gates=[] if control else list(data["intended_gates"]),
            verdict=data["verdict"],
            rejected_by=list(data.get("rejected_by", [])),
            failure_reasons=dict(data.get("failure_reasons", {})),
            skipped=list(data.get("skipped", [])),
            ratios=list(data.get("error_over_bound", [])),
            seconds=float(data.get("seconds", 0.0)),
            detail=data.get("detail", ""),
            authored_share=data.get("authored_share"),
        )


def _ratios(verdict: Any) -> list[dict[str, Any]]:
    """Worst error/bound per thresholded gate, with the error model that produced it."""
    rows = []
    for gate in verdict.gates:
        evidence = gate.evidence or {}
        ratio = evidence.get("worst_error_over_bound")
        model = evidence.get("error_model")
        if gate.kind.value != "thresholded" or not isinstance(ratio, int | float) or not model:
            continue
        rows.append(
            {
                "gate": gate.id,
                "status": gate.status.value,
                "error_model": str(model),
                "worst_error_over_bound": float(ratio),
            }
        )
    return rows


def _not_run_here(entry: Entry, device: str) -> tuple[str, str] | None:
    """(verdict, why) for an entry that ``device`` lists without verifying (a device-only
    one on the CPU, a CPU-only one on a device), else None. It needs no child process."""
    if entry.device_only and device == "cpu":
        return DEVICE_ONLY, entry.device_only
    if entry.cpu_only and device != "cpu":
        return CPU_ONLY, entry.cpu_only
    return None


def run_entry(
    entry: Entry, device: str = "cpu", timeout: float = 30.0, intended_only: bool = False
) -> EntryResult:
    """Verify one entry (in this process; the candidate runs in verify's sandbox worker).

    ``intended_only`` runs only a defect's intended gates (RES-01 always runs): enough to
    decide "rejected by an intended gate" at a fraction of the time, used by the CPU test;
    controls always run every gate.
    """
    from kernelgate.errors import KernelgateError
    from kernelgate.pipeline import verify

    result = EntryResult(entry.name, entry.is_control, list(entry.intended), "error")
    if (not_run := _not_run_here(entry, device)) is not None:
        result.verdict, result.detail = not_run
        return result
    started = time.monotonic()
    try:
        only = None
        if intended_only and not entry.is_control:
            # a defect only a rule catches is judged after CMP-01 alone: the rule needs no gate
            only = list(entry.intended_gates) or ["CMP-01"]
        rules: dict[str, Any] = {}
        for rule_id in entry.rules_in_force:
            rules |= RULE_OPTIONS[rule_id]
        verdict = verify(
            entry.reference_path,
            entry.candidate_path,
            device=device,
            timeout=timeout,
            only=only,
            **rules,
        )
    except KernelgateError as exc:
        result.detail = str(exc)
    else:
        result.verdict = verdict.verdict.value
        result.rejected_by = [*verdict.failed_gates, *verdict.failed_rules]
        result.failure_reasons = {
            g: verdict.gate(g).reason[:REASON_CHARS] for g in verdict.failed_gates
        } | {r.id: r.message[:REASON_CHARS] for r in verdict.rules if r.id in verdict.failed_rules}
        result.authored_share = (verdict.authorship or {}).get("authored_share")
        result.skipped = verdict.skipped
        result.ratios = _ratios(verdict)
    result.seconds = round(time.monotonic() - started, 2)
    return result


@dataclass
class Calibration:
    """Every entry's result plus the summaries ``calibrate`` prints."""

    device: str
    results: list[EntryResult]
    seconds: float = 0.0
    # ``verdict.environment`` of this calibration, worked out once and handed to every
    # Calibration built from it (the CLI writes its JSON after every entry): on a device it
    # initialises CUDA, which the parent need not pay for, or risk, once per row.
    environment: dict[str, Any] | None = None

    @property
    def defects(self) -> list[EntryResult]:
        return [r for r in self.results if not r.control]

    @property
    def controls(self) -> list[EntryResult]:
        return [r for r in self.results if r.control]

    @property
    def ok(self) -> bool:
        """Every run defect caught by an intended gate, no control rejected, no harness error.

        A device-only entry, defect or control, was not run: it neither passes nor fails."""
        return all(r.outcome in (CAUGHT, *NOT_RUN) for r in self.defects) and all(
            r.outcome in (PASSED, *NOT_RUN) for r in self.controls
        )

    def confusion(self) -> dict[str, list[str]]:
        rows: dict[str, list[str]] = {
            CAUGHT: [],
            OTHER_GATE: [],
            PASSED: [],
            DEVICE_ONLY: [],
            CPU_ONLY: [],
            ERROR: [],
        }
        for r in self.defects:
            rows[r.outcome].append(r.name)
        return rows

    def gate_catches(self) -> dict[str, dict[str, int]]:
        """Per gate: defects it rejected, of those the ones that intended it, controls it
        (wrongly) rejected."""
        counts: dict[str, dict[str, int]] = {}
        for r in self.results:
            for gate in r.rejected_by:
                row = counts.setdefault(gate, {"defects": 0, "intended": 0, "controls": 0})
                if r.control:
                    row["controls"] += 1
                else:
                    row["defects"] += 1
                    row["intended"] += gate in r.intended_gates
        return dict(sorted(counts.items()))

    def margins(self) -> dict[str, dict[str, Any]]:
        """Per error model: the largest honest error/bound over the controls (any thresholded
        gate) and the smallest error/bound with which a defect failed an intended thresholded
        gate. ``separation`` = smallest defective / largest honest: how far the safety factor
        could move either way before one side crosses the bound."""
        models: dict[str, dict[str, Any]] = {}

        def slot(model: str) -> dict[str, Any]:
            return models.setdefault(
                model,
                {
                    "largest_honest": 0.0,
                    "largest_honest_at": None,
                    "smallest_defective": math.inf,
                    "smallest_defective_at": None,
                },
            )

        for r in self.controls:
            for row in r.ratios:
                s = slot(row["error_model"])
                if row["worst_error_over_bound"] >= s["largest_honest"]:
                    s["largest_honest"] = row["worst_error_over_bound"]
                    s["largest_honest_at"] = f"{r.name} {row['gate']}"
        for r in self.defects:
            for row in r.ratios:
                # a structure failure (wrong dtype or shape) fails with no ratio to speak of
                if (
                    row["gate"] not in r.intended_gates
                    or row["status"] != "fail"
                    or row["worst_error_over_bound"] <= 1.0
                ):
                    continue
                s = slot(row["error_model"])
                if row["worst_error_over_bound"] < s["smallest_defective"]:
                    s["smallest_defective"] = row["worst_error_over_bound"]
                    s["smallest_defective_at"] = f"{r.name} {row['gate']}"
        for s in models.values():
            honest, bad = s["largest_honest"], s["smallest_defective"]
            s["separation"] = bad / honest if honest > 0 and math.isfinite(bad) else None
            if not math.isfinite(bad):
                s["smallest_defective"] = None
        return dict(sorted(models.items()))

    def times(self) -> dict[str, Any]:
        ran = [r for r in self.results if r.verdict not in NOT_RUN]
        if not ran:
            return {"median_s": None, "worst_s": None, "worst": None, "total_s": self.seconds}
        worst = max(ran, key=lambda r: r.seconds)
        return {
            "median_s": round(statistics.median(r.seconds for r in ran), 2),
            "worst_s": worst.seconds,
            "worst": worst.name,
            "total_s": self.seconds,
        }

    def to_dict(self) -> dict[str, Any]:
        if self.environment is None:
            from kernelgate.verdict import environment

            self.environment = environment(self.device, self.device)
        return {
            "schema": "kernelgate.calibration/1",
            "device": self.device,
            "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "environment": self.environment,
            "ok": self.ok,
            "defective": [r.to_dict() for r in self.defects],
            "controls": [r.to_dict() for r in self.controls],
            "confusion": self.confusion(),
            "gate_catches": self.gate_catches(),
            "margins": self.margins(),
            "times": self.times(),
        }


def default_jobs(device: str) -> int:
    """Verifications at once: the cores (at most 4) on CPU, 2 on a device (oracle memory)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return 2 if device != "cpu" else max(1, min(4, cores or 1))


def _child_argv(
    entry: Entry, device: str, timeout: float, intended_only: bool, out: Path
) -> list[str]:
    """The command that verifies ``entry`` in a fresh process and writes its row to ``out``
    (``kernelgate.redteam.child``). A function of its own so that a test can stand a
    misbehaving child in for it."""
    argv = [sys.executable, "-m", "kernelgate.redteam.child", entry.name, device, str(timeout)]
    return [*argv, str(out), *(["--intended-only"] if intended_only else [])]


class _Children:
    """The entry children alive now, so that a calibration stopped from outside (Ctrl-C, a
    device call's limit) kills them rather than waiting for them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._alive: set[subprocess.Popen[bytes]] = set()
        self.stopping = False

    def add(self, process: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._alive.add(process)
            stopping = self.stopping
        if stopping:
            _kill(process)

    def discard(self, process: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._alive.discard(process)

    def kill_all(self) -> None:
        with self._lock:
            self.stopping = True
            alive = list(self._alive)
        for process in alive:
            _kill(process)


def _kill(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL a child's whole tree: its descendants through /proc (the sandbox workers of
    its ``verify`` are in sessions of their own) and its own session."""
    from kernelgate.audit.processes import kill_tree

    kill_tree(process.pid)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def run_entry_in_child(
    entry: Entry,
    device: str = "cpu",
    timeout: float = 30.0,
    intended_only: bool = False,
    *,
    entry_timeout: float = ENTRY_TIMEOUT,
    children: _Children | None = None,
) -> EntryResult:
    """``run_entry`` in a fresh process, killed with its tree after ``entry_timeout`` s.

    Never raises for the child's sake: a child past the limit, one that crashes, or one
    that leaves no readable row gives an error row (verdict "error") saying so, with the
    tail of its output; such a row is neither a caught defect nor a passed control."""
    from kernelgate.audit.processes import child_env, tail

    result = EntryResult(entry.name, entry.is_control, list(entry.intended), "error")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f"kernelgate-cal-{entry.name}-") as folder:
        out, log = Path(folder) / "result.json", Path(folder) / "output.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                _child_argv(entry, device, timeout, intended_only, out),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                env=child_env(device),
                start_new_session=True,  # its group is killable without killing us
            )
        if children is not None:
            children.add(process)
        try:
            returncode: int | None = process.wait(timeout=entry_timeout)
        except subprocess.TimeoutExpired:
            returncode = None
        finally:
            _kill(process)  # also whatever an exited child left running
            process.wait()
            if children is not None:
                children.discard(process)
        result.seconds = round(time.monotonic() - started, 2)
        output_tail = tail(log, OUTPUT_TAIL_CHARS).strip()
        if returncode is None:
            result.detail = (
                f"no verdict within {entry_timeout:g} s: the entry's process and everything "
                "it started were killed"
            )
            return result
        try:
            data = json.loads(out.read_text())
            return EntryResult.from_dict(data)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if returncode < 0:
                why = f"killed by signal {-returncode}"
            elif returncode:
                why = f"exit status {returncode}"
            else:
                why = f"exit status 0 but no readable row: {exc}"
            result.detail = f"the entry's process gave no verdict ({why})" + (
                f"; its output ends: {output_tail}" if output_tail else ""
            )
            return result


def calibrate(
    device: str = "cpu",
    only: list[str] | None = None,
    *,
    jobs: int | None = None,
    timeout: float = 30.0,
    intended_only: bool = False,
    on_result: Callable[[EntryResult], None] | None = None,
    entry_timeout: float = ENTRY_TIMEOUT,
    in_children: bool | None = None,
) -> Calibration:
    """Verify every selected entry (device-only ones are listed, not run, in CPU mode).

    ``in_children``: each entry in a fresh process of its own, ``jobs`` at a time, killed
    after ``entry_timeout`` wall-clock seconds (``run_entry_in_child``). None (the default)
    means yes unless this is a CPU calibration with one job, which runs in this process, one
    entry after another, with no entry limit (the tests' per-entry calibrations: a child
    would add its imports to each). ``on_result`` is called in this thread, as each entry
    finishes."""
    started = time.monotonic()
    selected = entries(only)
    jobs = jobs or default_jobs(device)
    if in_children is None:
        in_children = jobs > 1 or device != "cpu"
    results: dict[str, EntryResult] = {}

    def done(result: EntryResult) -> None:
        results[result.name] = result
        if on_result is not None:
            on_result(result)

    to_run = []
    for entry in selected:
        if _not_run_here(entry, device) is not None:
            done(run_entry(entry, device))
        else:
            to_run.append(entry)
    if not in_children:
        for entry in to_run:
            done(run_entry(entry, device, timeout, intended_only))
    elif to_run:
        children = _Children()
        pool = ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="kernelgate-cal")
        try:
            futures = [
                pool.submit(
                    run_entry_in_child,
                    entry,
                    device,
                    timeout,
                    intended_only,
                    entry_timeout=entry_timeout,
                    children=children,
                )
                for entry in to_run
            ]
            for future in as_completed(futures):
                done(future.result())
        except BaseException:
            # stopped from outside: no entry starts, the running ones die now, not at the
            # end of their verifications
            children.kill_all()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
    ordered = [results[e.name] for e in selected]
    return Calibration(device, ordered, round(time.monotonic() - started, 2))
