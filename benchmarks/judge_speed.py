"""How long a full verdict takes next to KernelBench's own correctness check (issue 19).

Per record, in one run and side by side:

- ``check_s``: the KernelBench check (``kernelgate.audit.oldcheck``, a confined child), run
  through the audit judge's own ``_old_check``, wall time as this process sees it;
- ``verdict_s``: the full verdict as an audit pays for it, the wall time of
  ``kernelgate.audit.judge.judge_isolated`` (a fresh judge process: start-up, torch import,
  contract derivation, every gate, the evidence written). The audit's judge runs the old
  check too; here it finds the check's result already in the record's resume file
  (``old_check.json``, the file a judge killed mid-record resumes from), so the check is
  neither run nor timed twice. A judge that ran the check again anyway (the saved result
  did not match its key, or the check ran out of device memory) is flagged on its row
  (``check_rerun_in_judge``), and its ``verdict_s`` then includes a second check.

``--jobs N`` times N records at once (each its check, then its verdict), as an audit runs N
judges: the ratio is then one under that load, and the JSON's settings say N.

Then, unless ``--no-audit``, a real ``kernelgate audit`` over the same readable records with
``--audit-workers`` judges: its wall time gives ``audit_records_per_hour``.

The JSON is rewritten after every record (a device call killed at its time limit keeps
what was done) and ``--resume`` continues it. Corpus data is written only to a temporary
folder, never kept. Run on the H200 (the acceptance of issue 19)::

    PYTHONPATH=src python benchmarks/judge_speed.py /work/shared/corpora/cuda-l1/h100.jsonl \\
        --level 1 --whole-file --device cuda --audit-workers 12 --resume

On a CPU the JSON goes to /tmp unless ``--json`` says otherwise, so a trial never
overwrites device results.

``--from-audit DIR`` times nothing: an audit's judge runs the check and then the gates in
one process and says in its row how long the check took (``old_check_seconds``), so one
full audit is the one run that gives every record's check and verdict times and the records
an hour (``rows_from_audit`` says how ``verdict_s`` is formed there)::

    kernelgate audit h100.jsonl --out audit --device cuda --workers 12
    PYTHONPATH=src python benchmarks/judge_speed.py h100.jsonl --level 1 --from-audit audit \
        --json benchmarks/results/judge-speed.json
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from kernelgate.audit import admission, judge, oldcheck
from kernelgate.audit.store import STORE_NAME, ResultStore
from kernelgate.errors import KernelgateError
from kernelgate.evidence_io import write_atomic
from kernelgate.formats.corpus import FORMATS, CorpusRecord, detect_format, read_corpus
from kernelgate.progress import work_progress

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its siblings, however it is loaded
from provenance import code_commit, git, gpu_description, now, package_version

SCHEMA = "kernelgate.judge-speed/1"
ROOT = Path(__file__).resolve().parents[1]
DEVICE_RESULTS = ROOT / "benchmarks" / "results" / "judge-speed.json"
CPU_RESULTS = Path(tempfile.gettempdir()) / "judge-speed-cpu.json"
CHECK_RAN = (oldcheck.ACCEPTED, oldcheck.REJECTED, oldcheck.ERROR)
AUDIT_STOP_GRACE_S = 90.0  # an interrupted audit kills its judges and writes its report
REASON_CHARS = 300

MEANINGS = {
    "check_s": "wall time of the KernelBench correctness check (kernelgate.audit.oldcheck, "
    "5 trials, in its confined child process), run through the audit judge's _old_check",
    "verdict_s": "wall time of the audit's per-record judge (kernelgate.audit.judge."
    "judge_isolated: a fresh judge process, start-up, contract, every gate, evidence) "
    "WITHOUT the KernelBench check: the judge takes the check's result from its resume file "
    "(old_check.json); rows with check_rerun_in_judge=true ran it again and include it",
    "ratio": "verdict_s / check_s for one record; only where the check ran (not for "
    "unreadable records nor for a check that could not run on this device)",
    "ratio_median": "median over records of ratio (not a ratio of medians)",
    "verdict_p95_s": "95th percentile of verdict_s, linear interpolation between order statistics",
    "audit_records_per_hour": "readable records judged by a real `kernelgate audit` run over "
    "the same records with --workers audit_workers, per hour of that audit's wall time "
    "(start-up and report included); it runs the check and the verdict per record",
    "sequential_verdict_records_per_hour": "3600 * records / sum(verdict_s): the rate one "
    "judge at a time would reach on verdicts alone (a derived figure, not a measured audit)",
    "sequential_check_and_verdict_records_per_hour": "3600 * records / sum(check_s + "
    "verdict_s): one judge at a time doing what an audit's judge does (derived, not measured)",
}

# What the figures mean when they come from an audit's rows (``--from-audit``).
FROM_AUDIT_MEANINGS = {
    "check_s": "the audit judge's own wall time of the KernelBench check (old_check_seconds "
    "of its row), with the audit's other judges running beside it",
    "verdict_s": "the audit judge's launch-to-row wall time (judge_started_s + seconds) minus "
    "check_s and minus admission_wait_s: start-up, contract, every gate, evidence; the "
    "verification's worker starts during the check, and that overlap is counted in check_s",
    "admission_wait_s": "seconds the judge waited for device memory before its check and "
    "before its gates (the row's admission.old_check_waited_s + admission.waited_s): the "
    "audit's scheduling, in audit_records_per_hour but in neither check_s nor verdict_s",
    "audit_records_per_hour": "judged rows per hour of that same audit's wall time "
    "(summary throughput: judged_per_hour; unreadable and reused rows not counted)",
    "sanitizer_s": "wall time of RES-01's compute-sanitizer runs after the gates (the row's "
    "sanitizer.seconds: records whose candidate launched a kernel of its own, device audits "
    "only; 0 where none ran); part of verdict_s",
    "ratio_without_sanitizers": "(verdict_s - sanitizer_s) / check_s: the twelve gates as "
    "`kernelgate verify` runs them without --sanitize, beside the audit's default",
}

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


# -- numbers -------------------------------------------------------------------------------


def percentile(values: list[float], fraction: float) -> float | None:
    """The ``fraction`` quantile of ``values`` (linear between order statistics), or None."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * fraction
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _rounded(value: float | None, digits: int = 3) -> float | None:
    return None if value is None else round(value, digits)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Medians, p95 and derived rates over per-record rows (those with timings only).

    Why medians of the per-record ratio rather than a ratio of medians: the acceptance asks
    how much dearer a verdict is than the check *on the same record*; records differ in size
    by orders of magnitude, and a ratio of medians would compare different records.
    """
    rows = list(rows)
    checks = [r["check_s"] for r in rows if r.get("check_s") is not None]
    verdicts = [r["verdict_s"] for r in rows if r.get("verdict_s") is not None]
    ratios = [r["ratio"] for r in rows if r.get("ratio") is not None]
    # the same without the sanitizer pass (rows of an audit: --from-audit only)
    gate_ratios = [
        r["ratio_without_sanitizers"] for r in rows if r.get("ratio_without_sanitizers") is not None
    ]
    sanitized = [r["sanitizer_s"] for r in rows if r.get("sanitizer_s")]
    both = [r for r in rows if r.get("check_s") is not None and r.get("verdict_s") is not None]
    verdict_sum = sum(verdicts)
    both_sum = sum(r["check_s"] + r["verdict_s"] for r in both)
    return {
        "records": len(rows),
        "timed_records": len(ratios),
        "kernelbench_check_median_s": _rounded(_median(checks)),
        "verdict_median_s": _rounded(_median(verdicts)),
        "ratio_median": _rounded(_median(ratios), 4),
        "ratio_p95": _rounded(percentile(ratios, 0.95), 4),
        "ratio_median_without_sanitizers": _rounded(_median(gate_ratios), 4),
        "sanitized_records": len(sanitized),
        "sanitizer_median_s": _rounded(_median(sanitized)),
        "kernelbench_check_p95_s": _rounded(percentile(checks, 0.95)),
        "verdict_p95_s": _rounded(percentile(verdicts, 0.95)),
        "sequential_verdict_records_per_hour": (
            _rounded(3600.0 * len(verdicts) / verdict_sum, 1) if verdict_sum > 0 else None
        ),
        "sequential_check_and_verdict_records_per_hour": (
            _rounded(3600.0 * len(both) / both_sum, 1) if both_sum > 0 else None
        ),
        "verdicts": dict(Counter(str(r.get("verdict")) for r in rows)),
        "check_statuses": dict(Counter(str(r.get("check_status")) for r in rows)),
        "checks_rerun_in_judge": sum(1 for r in rows if r.get("check_rerun_in_judge")),
    }


# -- one record ------------------------------------------------------------------------------


def record_level(record: CorpusRecord) -> int | None:
    """The KernelBench level a record's format names (CUDA-L1, KernelBench runs), or None."""
    level = record.source_ids.get("level")
    try:
        return int(level) if level is not None else None
    except (TypeError, ValueError):
        return None


def gate_seconds(judged: dict[str, Any]) -> dict[str, Any]:
    """Where a judge row's time went, gate by gate (skipped gates left out)."""
    return {
        g["id"]: g.get("seconds") for g in judged.get("gates", []) if g.get("status") != "skipped"
    }


def timed_row(record: CorpusRecord, options: judge.AuditOptions) -> dict[str, Any]:
    """``time_record``, with a fault of this script or the judge's set-up as an error row."""
    try:
        return time_record(record, options)
    except Exception as exc:
        return {
            "id": record.id,
            "level": record_level(record),
            "check_s": None,
            "verdict_s": None,
            "ratio": None,
            "verdict": judge.ERROR,
            "check_status": oldcheck.NOT_RUN,
            "errors": [f"timing failed: {type(exc).__name__}: {exc}"[:REASON_CHARS]],
        }


def time_record(record: CorpusRecord, options: judge.AuditOptions) -> dict[str, Any]:
    """Time the KernelBench check and the audit's verdict on one record; never raises for
    the record (what went wrong is in the row's ``errors``)."""
    from kernelgate.formats.kernelbench import candidate_backend

    row: dict[str, Any] = {
        "id": record.id,
        "level": record_level(record),
        "task": record.source_ids.get("task", record.source_ids.get("problem")),
        "check_s": None,
        "verdict_s": None,
        "ratio": None,
        "verdict": judge.UNREADABLE if record.unreadable else None,
        "check_status": oldcheck.NOT_RUN,
        "check_status_current": oldcheck.NOT_RUN,
        "errors": [],
    }
    if record.unreadable is not None:
        row["errors"].append(f"unreadable record: {record.unreadable}")
        return row
    work = Path(options.out_dir) / "records" / judge.work_folder_name(record.id)
    shutil.rmtree(work, ignore_errors=True)  # never a result from an earlier run
    work.mkdir(parents=True)
    reference, candidate = judge.materialize(record, work)
    try:
        backend: str | None = candidate_backend(candidate.read_text())
    except (OSError, UnicodeDecodeError):
        backend = None
    # the key the judge computes for this record's resume files: the saved check is the
    # judge's to reuse
    key = judge.record_key(reference, candidate, options)
    started = time.monotonic()
    saved = work / judge.OLD_CHECK_NAME
    old = judge._old_check(reference, candidate, backend, options, saved, key)
    check_seconds = time.monotonic() - started
    # Marked, so that a judge that ran the check again (its key differs from ours) is told
    # apart from one that took this result: equal results do not say which happened.
    mark = f"judge-speed:{os.getpid()}:{time.time_ns()}"
    write_atomic(saved, json.dumps({"key": key, "result": old | {"timed_check": mark}}))
    check_ran = old.get("status") in CHECK_RAN  # not: a CUDA candidate on the CPU
    row |= {
        "backend": backend,
        "check_status": old.get("status"),
        "check_status_current": old.get("status_current", old.get("status")),
        "check_s": round(check_seconds, 3) if check_ran else None,
    }
    if old.get("status") in (oldcheck.ERROR, oldcheck.NOT_RUN) and old.get("failure"):
        row["errors"].append(f"check: {str(old['failure'])[:REASON_CHARS]}")
    started = time.monotonic()
    verdict_row = judge.judge_isolated(record, options)
    verdict_seconds = time.monotonic() - started
    detail = verdict_row.get("old_check_detail") or {}
    row |= {
        "verdict_s": round(verdict_seconds, 3),
        "verdict": verdict_row.get("verdict"),
        "stage": verdict_row.get("stage"),
        "failed_gates": verdict_row.get("failed_gates", []),
        "verify_s": verdict_row.get("verify_seconds"),
        "judge_s": verdict_row.get("seconds"),
        "gate_seconds": gate_seconds(verdict_row),
        "check_rerun_in_judge": None if not detail else detail.get("timed_check") != mark,
        # for planning judges a GPU holds (issue 19's memory-aware admission)
        "device_memory_incident": bool(verdict_row.get("device_memory_incident")),
        "peak_memory": verdict_row.get("peak_memory"),
    }
    if verdict_row.get("reason"):
        row["reason"] = str(verdict_row["reason"])[:REASON_CHARS]
    if verdict_row.get("verdict") == judge.ERROR:
        row["errors"].append(f"verdict: {str(verdict_row.get('reason'))[:REASON_CHARS]}")
    if row["check_s"] is not None and row["check_s"] > 0:
        row["ratio"] = round(row["verdict_s"] / row["check_s"], 4)
    shutil.rmtree(work, ignore_errors=True)  # corpus data: nothing is kept
    return row


# -- the audit -------------------------------------------------------------------------------


def write_audit_corpus(records: list[CorpusRecord], fmt: str, folder: Path) -> tuple[Path, str]:
    """The records as a corpus ``kernelgate audit`` reads: CUDA-L1 lines (one file per source
    file, same names, so ids stay the same) for CUDA-L1, else a pairs folder."""
    folder.mkdir(parents=True, exist_ok=True)
    if fmt == "cuda-l1":
        files: dict[str, list[str]] = {}
        for record in records:
            line = {
                "level_id": record.source_ids.get("level"),
                "task_id": record.source_ids.get("task"),
                "ref_code": record.reference_source,
                "custom_code": record.candidate_source,
            }
            stem = str(record.source_ids.get("file") or "corpus")
            files.setdefault(stem, []).append(json.dumps(line))
        for stem, lines in files.items():
            (folder / f"{stem}.jsonl").write_text("\n".join(lines) + "\n")
        return folder, "cuda-l1"
    for record in records:
        pair = folder / judge.work_folder_name(record.id)
        pair.mkdir()
        for role, path, source in (
            ("reference", record.reference_path, record.reference_source),
            ("candidate", record.candidate_path, record.candidate_source),
        ):
            text = Path(path).read_text() if path is not None else (source or "")
            (pair / f"{role}.py").write_text(text)
    return folder, "pairs"


def run_timed_audit(
    records: list[CorpusRecord],
    fmt: str,
    *,
    device: str,
    timeout: float,
    workers: int | None,
    time_limit: float | None,
    scratch: Path,
    timed_rows: list[dict[str, Any]],
) -> dict[str, Any]:
    """Run ``kernelgate audit`` on ``records`` and measure records judged per hour.

    Stopped with SIGINT (the audit keeps what it judged) at ``time_limit`` seconds, so a
    device call's deadline still leaves a rate, marked ``complete: false``.
    """
    corpus, audit_format = write_audit_corpus(records, fmt, scratch / "audit-corpus")
    out = scratch / "audit-out"
    command = [
        sys.executable,
        "-m",
        "kernelgate.cli",
        "audit",
        str(corpus),
        "--out",
        str(out),
        "--format",
        audit_format,
        "--device",
        device,
        "--timeout",
        f"{timeout:g}",
    ]
    if workers is not None:
        command += ["--workers", str(workers)]
    log_path = scratch / "audit.log"
    stopped = False
    started = time.monotonic()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, process_group=0
        )
        try:
            code = process.wait(timeout=time_limit)
        except subprocess.TimeoutExpired:
            stopped = True
            process.send_signal(signal.SIGINT)
            try:
                code = process.wait(timeout=AUDIT_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                code = process.wait()
        except BaseException:
            process.send_signal(signal.SIGINT)
            process.wait(timeout=AUDIT_STOP_GRACE_S)
            raise
    wall = time.monotonic() - started
    rows: list[dict[str, Any]] = []
    if (out / STORE_NAME).exists():
        store = ResultStore(out / STORE_NAME)
        try:
            rows = store.rows()
        finally:
            store.close()
    log_text = log_path.read_text(errors="replace")
    timed = {row["id"]: row.get("verdict") for row in timed_rows}
    differing = sorted(
        r["id"] for r in rows if r["id"] in timed and timed[r["id"]] != r.get("verdict")
    )
    return {
        "command": shlex.join(["python", "-m", "kernelgate.cli", *command[3:]]),
        "workers": workers if workers is not None else "the audit's default (GPUs or cores)",
        "records": len(records),
        "rows_stored": len(rows),
        "complete": code == 0 and len(rows) == len(records),
        "stopped_at_time_limit": stopped,
        "exit_code": code,
        "wall_s": round(wall, 2),
        "audit_records_per_hour": round(3600.0 * len(rows) / wall, 1) if wall > 0 else None,
        "verdicts": dict(Counter(str(r.get("verdict")) for r in rows)),
        "old_check": dict(Counter(str(r.get("old_check")) for r in rows)),
        # the same record, judged twice by the same code: a difference is a flaky gate or
        # a judge that failed for load (memory beside other judges), worth a look
        "verdicts_differing_from_timed_run": differing,
        "log_tail": log_text[-2000:] if code != 0 else None,
    }


# -- from an audit's rows --------------------------------------------------------------------


def rows_from_audit(folder: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Per-record rows and the audit block, read from a finished (or stopped) audit's store.

    The audit's judge runs the KernelBench check and then the gates in one process
    (``judge_record``), and its row says how long the check took (``old_check_seconds``): the
    check and the verdict of each record are then timed in one run, the audit itself, with
    its judges side by side, and the same audit gives ``audit_records_per_hour``. Nothing
    is run again. ``verdict_s`` is the judge's launch-to-row time minus the check and minus
    its waits for device memory (``judge_started_s`` + ``seconds`` - ``old_check_seconds`` -
    ``admission.row_waited_seconds``: the audit's scheduling, not the verdict's work); the
    verification's worker starts while the check runs (``_spawned_ahead``), so what overlaps
    the check is counted once, in the check. Rows whose check was taken from an earlier
    attempt (a resumed judge), or of stores written before ``old_check_seconds`` existed,
    have no ratio.
    """
    from kernelgate.audit import report

    path = folder / STORE_NAME
    if not path.is_file():
        raise KernelgateError(
            f"{folder} holds no audit store ({STORE_NAME}): give the --out folder of a "
            "`kernelgate audit` run"
        )
    store = ResultStore(path)
    try:
        stored, runs, settings = store.rows(), store.runs(), store.settings()
        corpus = store.corpus_ids()
    finally:
        store.close()
    rows = [audit_row(row) for row in stored]
    rate = report.throughput(runs, len(stored))
    audit = {
        "source": "the audit whose rows these are (--from-audit)",
        "folder": str(folder),
        "settings": settings,
        "workers": sorted({r.get("workers") for r in runs if r.get("workers") is not None}),
        "records": len(corpus) if corpus else len(stored),
        "rows_stored": len(stored),
        "complete": not corpus or len(stored) == len(corpus),
        "wall_s": round(rate["wall_hours"] * 3600, 1),
        "audit_records_per_hour": rate["judged_per_hour"],
        "throughput": rate,
        "verdicts": dict(Counter(str(r.get("verdict")) for r in stored)),
        "old_check": dict(Counter(str(r.get("old_check")) for r in stored)),
    }
    return rows, audit


def audit_row(stored: dict[str, Any]) -> dict[str, Any]:
    """One judge_speed row from one audit row (see ``rows_from_audit``)."""
    ids = stored.get("source_ids") or {}
    row: dict[str, Any] = {
        "id": stored["id"],
        "level": _int_or_none(ids.get("level")),
        "task": ids.get("task", ids.get("problem")),
        "check_s": None,
        "verdict_s": None,
        "ratio": None,
        "verdict": stored.get("verdict"),
        "stage": stored.get("stage"),
        "failed_gates": stored.get("failed_gates", []),
        "check_status": stored.get("old_check", oldcheck.NOT_RUN),
        "check_status_current": stored.get("old_check_current", stored.get("old_check")),
        "judge_s": stored.get("seconds"),
        "verify_s": stored.get("verify_seconds"),
        "judge_started_s": stored.get("judge_started_s"),
        "gate_seconds": gate_seconds(stored),
        "errors": [],
    }
    if stored.get("reused_from"):
        row["errors"].append("reused from another audit: not timed here")
        return row
    sanitizer = (stored.get("sanitizer") or {}).get("seconds")
    row["sanitizer_s"] = round(float(sanitizer), 3) if isinstance(sanitizer, int | float) else 0.0
    check = stored.get("old_check_seconds")
    row["admission_wait_s"] = admission.row_waited_seconds(stored)
    if row["check_status"] in CHECK_RAN and isinstance(check, int | float):
        row["check_s"] = round(float(check), 3)
        total = float(stored.get("judge_started_s") or 0.0) + float(stored.get("seconds") or 0)
        row["verdict_s"] = round(max(total - check - row["admission_wait_s"], 0.0), 3)
        if check > 0:
            row["ratio"] = round(row["verdict_s"] / check, 4)
            gates_only = max(row["verdict_s"] - row["sanitizer_s"], 0.0)
            row["ratio_without_sanitizers"] = round(gates_only / check, 4)
    if stored.get("verdict") == judge.ERROR and stored.get("reason"):
        row["errors"].append(f"verdict: {str(stored['reason'])[:REASON_CHARS]}")
    return row


def from_audit_run(
    corpus: Path, folder: Path, *, level: int | None, json_out: Path | None, errors: Console
) -> dict[str, Any]:
    """The ``--from-audit`` command: the JSON of a timed run, made from an audit's rows."""
    rows, audit = rows_from_audit(folder)
    if level is not None and not any(r.get("level") == level for r in rows):
        raise KernelgateError(f"no row of the audit in {folder} is of level {level}")
    if json_out is None:
        json_out = DEVICE_RESULTS if audit["settings"].get("device") == "cuda" else CPU_RESULTS
    settings = {
        "corpus": corpus.name,
        "corpus_sha256": corpus_sha256(corpus) if corpus.is_file() else None,
        "level": level,
        "whole_file": True,
        "from_audit": str(folder),
        "device": audit["settings"].get("device"),
        "timeout": audit["settings"].get("timeout"),
        "seed": audit["settings"].get("seed"),
        "jobs": audit["workers"],
    }
    audit_sha = audit["settings"].get("source_sha256")
    if settings["corpus_sha256"] and audit_sha and audit_sha != settings["corpus_sha256"]:
        raise KernelgateError(f"the audit in {folder} judged another corpus than {corpus}")
    document = results_document(
        rows,
        settings=settings,
        level=level,
        whole_file=True,
        audit=audit,
        complete=bool(audit["complete"]),
        meta=provenance(str(settings["device"] or "cpu")),
    )
    document["meanings"] = MEANINGS | FROM_AUDIT_MEANINGS
    write_atomic(json_out, json.dumps(document, indent=1) + "\n")
    errors.print(
        f"{len(rows)} rows of {folder}: ratio median {document['ratio_median']} over "
        f"{document['headline_over']}, {document['audit_records_per_hour']} records an hour; "
        f"results: {json_out}",
        highlight=False,
    )
    return document


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


# -- provenance ------------------------------------------------------------------------------


def provenance(device: str) -> dict[str, Any]:
    """What the numbers were measured with: device, versions, code, date, command."""
    status = git("status", "--porcelain", "--untracked-files=no")
    return {
        "device": device,
        **(gpu_description() if device.startswith("cuda") else {"gpu": None, "driver": None}),
        "python": platform.python_version(),
        "torch": package_version("torch"),
        "triton": package_version("triton"),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "code_commit": code_commit(),
        "code_dirty": None if status == "unknown" else bool(status),
        "judged_with": judge.code_digest(),
        "date": now(),
        "command": shlex.join(["python", "benchmarks/judge_speed.py", *sys.argv[1:]]),
    }


# -- the command -----------------------------------------------------------------------------


def select(
    records: list[CorpusRecord],
    *,
    level: int | None,
    whole_file: bool,
    ids: list[str],
    limit: int | None,
    sample: int | None = None,
) -> list[CorpusRecord]:
    """The records to time: of ``level`` (all of them with ``whole_file``), among ``ids``,
    ``sample`` of them at an even stride (each level in proportion, in corpus order), the
    first ``limit``."""
    chosen = records
    if level is not None and not whole_file:
        chosen = [r for r in chosen if record_level(r) == level]
    if ids:
        wanted = set(ids)
        unknown = wanted - {r.id for r in records}
        if unknown:
            raise KernelgateError(
                f"record id(s) not in the corpus: {', '.join(sorted(unknown)[:5])}"
                + (" ..." if len(unknown) > 5 else "")
                + " (ids look like h100/L1/T12; see the corpus's level_id and task_id)"
            )
        chosen = [r for r in chosen if r.id in wanted]
    if sample is not None and sample < len(chosen):
        stride = len(chosen) / sample
        chosen = [chosen[int(index * stride)] for index in range(sample)]
    if limit is not None:
        chosen = chosen[:limit]
    return chosen


def results_document(
    rows: list[dict[str, Any]],
    *,
    settings: dict[str, Any],
    level: int | None,
    whole_file: bool,
    audit: dict[str, Any] | None,
    complete: bool,
    meta: dict[str, Any],
) -> dict[str, Any]:
    """The JSON written after every record: headline figures, the per-record rows, the
    summaries over the whole run and per level, the audit, provenance."""
    headline_rows = [r for r in rows if level is None or r.get("level") == level]
    headline = summarize(headline_rows)
    by_level: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        by_level.setdefault(str(row.get("level")), []).append(row)
    document: dict[str, Any] = {
        "schema": SCHEMA,
        "complete": complete,
        "headline_over": f"level {level}" if level is not None else "every record timed",
        "records": rows,
        "record_count": len(rows),
        "kernelbench_check_median_s": headline["kernelbench_check_median_s"],
        "verdict_median_s": headline["verdict_median_s"],
        "ratio_median": headline["ratio_median"],
        "ratio_median_without_sanitizers": headline["ratio_median_without_sanitizers"],
        "verdict_p95_s": headline["verdict_p95_s"],
        "audit_records_per_hour": (audit or {}).get("audit_records_per_hour"),
        "summary": headline,
        "whole_file": summarize(rows) if whole_file else None,
        "by_level": {name: summarize(group) for name, group in sorted(by_level.items())},
        "audit": audit,
        "settings": settings,
        "meanings": MEANINGS,
        **meta,
    }
    return document


def corpus_sha256(source: Path) -> str:
    from kernelgate.audit.identity import source_digest

    return source_digest(source)


def earlier_rows(json_path: Path, settings: dict[str, Any]) -> tuple[list[dict], dict | None]:
    """Rows and audit of an earlier run of the same settings at ``json_path`` (``--resume``)."""
    try:
        earlier = json.loads(json_path.read_text())
    except FileNotFoundError:
        return [], None
    except (OSError, ValueError) as exc:
        raise KernelgateError(f"cannot resume from {json_path}: {exc}") from exc
    if earlier.get("schema") != SCHEMA or earlier.get("settings") != settings:
        raise KernelgateError(
            f"{json_path} was written with other settings (corpus, device, timeout, selection);"
            " drop --resume to start afresh, or pass another --json"
        )
    audit = earlier.get("audit")
    return list(earlier.get("records", [])), audit if audit_usable(audit) else None


def audit_usable(audit: dict[str, Any] | None) -> bool:
    """Whether a timed audit gave a rate worth keeping: it finished, or was stopped at its
    time limit after storing rows (a rate over those); not one that failed."""
    return bool(
        audit
        and audit.get("rows_stored")
        and (audit.get("complete") or audit.get("stopped_at_time_limit"))
    )


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@app.command()
def main(
    corpus: Annotated[Path, typer.Argument(help="A corpus `kernelgate audit` reads.")],
    fmt: Annotated[str, typer.Option("--format", help=f"auto, {', '.join(FORMATS)}")] = "auto",
    problems: Annotated[
        Path | None, typer.Option(help="KernelBench problem folder (kernelbench-run format).")
    ] = None,
    level: Annotated[int | None, typer.Option(help="Only this KernelBench level.")] = None,
    whole_file: Annotated[
        bool,
        typer.Option(
            "--whole-file", help="With --level: time every record; headline over --level."
        ),
    ] = False,
    ids: Annotated[
        list[str] | None, typer.Option("--ids", help="Record ids (repeat, or comma-separated).")
    ] = None,
    limit: Annotated[int | None, typer.Option(help="The first N records (after filters).")] = None,
    sample: Annotated[
        int | None, typer.Option(help="N records at an even stride (after filters).")
    ] = None,
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    timeout: Annotated[float, typer.Option(help="Per candidate call, as the audit's.")] = 60.0,
    json_out: Annotated[
        Path | None,
        typer.Option("--json", help="Output (default: results/judge-speed.json on cuda)."),
    ] = None,
    audit_workers: Annotated[
        int | None, typer.Option(help="Workers of the timed audit (default: the audit's).")
    ] = None,
    no_audit: Annotated[bool, typer.Option("--no-audit", help="Skip the timed audit.")] = False,
    audit_time_limit: Annotated[
        float | None, typer.Option(help="Stop the audit after S seconds (rate from its rows).")
    ] = None,
    resume: Annotated[bool, typer.Option(help="Continue the rows already in --json.")] = False,
    time_budget: Annotated[
        float | None,
        typer.Option(help="Start no record after S s (at least one; the rest: --resume)."),
    ] = None,
    jobs: Annotated[
        int,
        typer.Option(
            min=1,
            help="Records timed at once (each its check, then its verdict, as one audit "
            "worker pays for them; the JSON says how many ran beside each other).",
        ),
    ] = 1,
    from_audit: Annotated[
        Path | None,
        typer.Option(
            help="Time nothing: read check and verdict times from this audit folder's rows "
            "(one run: the audit), and its records an hour. CORPUS names what it audited."
        ),
    ] = None,
) -> None:
    """Time the KernelBench check and the full verdict per record; write the JSON."""
    errors = Console(stderr=True)
    if from_audit is not None:
        try:
            from_audit_run(corpus, from_audit, level=level, json_out=json_out, errors=errors)
        except KernelgateError as exc:
            errors.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        return
    # a device call's deadline sends SIGTERM: unwind as for Ctrl-C, so the judge in flight
    # and its processes are killed (judge_isolated) and the scratch folder removed
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        run(
            corpus,
            fmt=fmt,
            problems=problems,
            level=level,
            whole_file=whole_file,
            ids=[i for chunk in ids or [] for i in chunk.split(",") if i.strip()],
            limit=limit,
            sample=sample,
            device=device,
            timeout=timeout,
            json_out=json_out,
            audit_workers=audit_workers,
            no_audit=no_audit,
            audit_time_limit=audit_time_limit,
            resume=resume,
            time_budget=time_budget,
            jobs=jobs,
            errors=errors,
        )
    except KernelgateError as exc:
        errors.print(f"[red]error:[/] {exc}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None


def run(
    corpus: Path,
    *,
    fmt: str,
    problems: Path | None,
    level: int | None,
    whole_file: bool,
    ids: list[str],
    limit: int | None,
    device: str,
    timeout: float,
    json_out: Path | None,
    audit_workers: int | None,
    no_audit: bool,
    audit_time_limit: float | None,
    resume: bool,
    errors: Console,
    time_budget: float | None = None,
    sample: int | None = None,
    jobs: int = 1,
) -> None:
    """The command's body: select, time record by record (JSON after each), audit, finish."""
    if device not in ("cpu", "cuda"):
        raise KernelgateError(f"--device must be cpu or cuda, not {device!r}")
    if whole_file and level is None:
        raise KernelgateError("--whole-file needs --level (the level the headline is over)")
    if audit_workers is not None and audit_workers < 1:
        raise KernelgateError("--audit-workers must be at least 1")
    if json_out is None:
        json_out = DEVICE_RESULTS if device == "cuda" else CPU_RESULTS
    fmt = detect_format(corpus) if fmt == "auto" else fmt
    records = select(
        read_corpus(corpus, fmt, problems=problems),
        level=level,
        whole_file=whole_file,
        ids=ids,
        limit=limit,
        sample=sample,
    )
    if not records:
        raise KernelgateError(f"no record of {corpus} matches the selection (level {level})")
    settings = {
        "corpus": corpus.name,
        "corpus_sha256": corpus_sha256(corpus),
        "format": fmt,
        "level": level,
        "whole_file": whole_file,
        "ids": ids,
        "limit": limit,
        "sample": sample,
        "device": device,
        "timeout": timeout,
        "seed": 0,
        # records timed beside each other: their rows share the machine, so a resumed run
        # must time the rest under the same load
        "jobs": jobs,
    }
    rows, audit = earlier_rows(json_out, settings) if resume else ([], None)
    done = {row["id"] for row in rows}
    meta = provenance(device)
    errors.print(
        f"timing {len(records)} record(s) of {corpus} on {device}"
        + (f" ({len(done)} already in {json_out})" if done else "")
        + f"; results: {json_out}",
        highlight=False,
    )

    def write(complete: bool) -> None:
        document = results_document(
            rows,
            settings=settings,
            level=level,
            whole_file=whole_file,
            audit=audit,
            complete=complete,
            meta=meta,
        )
        write_atomic(json_out, json.dumps(document, indent=1) + "\n")

    with tempfile.TemporaryDirectory(prefix="judge-speed-") as scratch:
        options = judge.AuditOptions(
            out_dir=str(Path(scratch) / "judged"), device=device, timeout=timeout
        )
        todo = [r for r in records if r.id not in done]
        budget_ends = None if time_budget is None else time.monotonic() + time_budget
        progress = work_progress(errors, "records", rate=True)
        with progress, ThreadPoolExecutor(max_workers=jobs) as pool:
            task = progress.add_task("timing", total=len(todo))
            waiting = iter(todo)
            in_flight: set[Future[dict[str, Any]]] = set()

            def start_next() -> None:
                # at least one a run, so that every device call gains
                over = budget_ends is not None and time.monotonic() > budget_ends
                if over and (rows or in_flight):
                    return
                record = next(waiting, None)
                if record is not None:
                    in_flight.add(pool.submit(timed_row, record, options))

            for _ in range(jobs):
                start_next()
            while in_flight:
                finished, _ = wait(in_flight, return_when=FIRST_COMPLETED)
                for future in finished:
                    in_flight.discard(future)
                    row = future.result()
                    rows.append(row)
                    write(complete=False)
                    progress.update(task, description=row["id"])
                    progress.advance(task)
                    if not errors.is_terminal:
                        errors.print(
                            f"[{len(rows)}/{len(records)}] {row['id']}: check "
                            f"{row['check_status']} {row['check_s']} s, verdict "
                            f"{row['verdict']} {row['verdict_s']} s, ratio {row['ratio']}",
                            highlight=False,
                        )
                    start_next()
        left = len(records) - len({row["id"] for row in rows})
        audit_due = not no_audit and audit is None
        if left:
            errors.print(
                f"time budget spent: {left} record(s) left; continue with --resume"
                " (the audit runs once every record is timed)",
                highlight=False,
            )
        elif audit_due and time_budget is not None and todo:
            # with a budget, a run times or audits, never both: one device call's limit
            # must not cut the audit short for time the timing already spent
            errors.print("every record timed; the audit runs in the next --resume", highlight=False)
        elif audit_due:
            readable = [r for r in records if r.unreadable is None]
            errors.print(
                f"auditing the {len(readable)} readable record(s) with "
                f"{audit_workers or 'the default number of'} worker(s)",
                highlight=False,
            )
            audit = run_timed_audit(
                readable,
                fmt,
                device=device,
                timeout=timeout,
                workers=audit_workers,
                time_limit=audit_time_limit,
                scratch=Path(scratch),
                timed_rows=rows,
            )
        write(complete=not left and (no_audit or audit_usable(audit)))
    document = json.loads(json_out.read_text())
    figures = {
        key: document[key]
        for key in (
            "kernelbench_check_median_s",
            "verdict_median_s",
            "ratio_median",
            "verdict_p95_s",
            "audit_records_per_hour",
        )
    }
    Console().print(
        f"{document['headline_over']}: "
        + ", ".join(f"{k} {v}" for k, v in figures.items())
        + f"\nresults: {json_out}",
        highlight=False,
        soft_wrap=True,
    )


if __name__ == "__main__":
    app()
