"""The audit: corpus formats, a complete report, SIGKILL, SIGINT, SIGTERM and --resume, Ray.

The corpus is tiny and plain PyTorch (see ``audit_corpus.py``); ``--timeout 2`` keeps the
hanging candidate cheap. Most tests here are about the audit's mechanics (resume, retries,
executors, the report), which do not depend on which gates run: they audit with ``--only
EXC-01`` (``ONLY``), a partial audit in which every expected verdict still holds (EXC-01
rejects the NaN swallower, RES-01 always runs and rejects the crash and the hang), and
which costs a crashing candidate one worker start instead of one per gate. A complete
audit, every gate, is ``conftest.two_record_audit``, which tests that start from a
finished audit copy.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernelgate.audit.report import PLOTS
from kernelgate.audit.store import STORE_NAME
from kernelgate.formats.corpus import detect_format, read_corpus
from kernelgate.gates import GATE_IDS

from .audit_corpus import CANDIDATES, EXPECTED, REFERENCE, write_pairs
from .conftest import ROOT, audit_command, copy_audit, gone
from .conftest import kernelgate as run_kernelgate

# An audit's subprocess is given at most 240 s here.
kernelgate = functools.partial(run_kernelgate, timeout=240)

# The gates of the partial audits here (see the module's docstring); RES-01 always runs.
ONLY = "EXC-01"


def audit_args(corpus: Path, out: Path, *options: str) -> list[str]:
    """``kernelgate audit`` of ``corpus`` into ``out`` at the tests' timeout, partial
    (``--only ONLY``), plus ``options``."""
    return audit_command(corpus, out, "--only", ONLY, *options)


def stored_rows(out: Path) -> dict[str, dict[str, Any]]:
    """The store's rows by record id, read straight from its SQLite file."""
    with sqlite3.connect(out / STORE_NAME) as db:
        return {i: json.loads(d) for i, d in db.execute("SELECT id, data FROM rows")}


def deferred_count(out: Path) -> int:
    """Entries left in the store's table of records deferred for memory."""
    with sqlite3.connect(out / STORE_NAME) as db:
        return db.execute("SELECT COUNT(*) FROM alone").fetchone()[0]


def fake_executors(
    monkeypatch: pytest.MonkeyPatch,
    judge: Callable[[Any, int], dict[str, Any] | None] = lambda record, workers: None,
) -> list[tuple[int, list[str]]]:
    """Make the runner's executors fakes that judge nothing: ``judge(record, workers)`` gives
    a record's row in a pool of that size (None: verified). Returns the log of their calls,
    (pool size, sorted record ids), filled as the runner uses them."""
    from kernelgate.audit import runner
    from kernelgate.audit.judge import base_row

    calls: list[tuple[int, list[str]]] = []

    class FakeExecutor:
        def __init__(self, workers: int) -> None:
            self.workers, self.description = workers, f"fake, {workers}"

        def judge_all(self, records, options):
            calls.append((self.workers, sorted(r.id for r in records)))
            for record in records:
                row = judge(record, self.workers)
                verified = base_row(record) | {"verdict": "verified", "stage": "gates"}
                yield record, verified if row is None else row

        def close(self) -> None:
            pass

    monkeypatch.setattr(
        runner, "make_executor", lambda kind, *, workers, **_: FakeExecutor(workers)
    )
    return calls


def outcomes(summary: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """What must not depend on the executor: verdict, failed gates, old-check results."""
    return {
        row["id"]: (
            row["verdict"],
            tuple(row["failed_gates"]),
            row["stage"],
            row["old_check"],
            row["old_check_current"],
        )
        for row in summary["rows"]
    }


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_pairs(tmp_path_factory.mktemp("audit") / "corpus")


@pytest.fixture(scope="module")
def local_audit(corpus: Path) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = corpus.parent / "local"
    result = kernelgate(*audit_args(corpus, out, "--workers", "2"))
    return out, result


# -- formats -------------------------------------------------------------------------------


def test_pairs_format_reads_both_layouts_and_flags_orphans(corpus: Path) -> None:
    assert detect_format(corpus) == "pairs"
    records = {r.id: r for r in read_corpus(corpus)}
    assert set(records) == set(EXPECTED)
    assert records["orphan"].unreadable == "pair 'orphan' has no candidate file"
    assert records["honest"].candidate_path.endswith("honest/candidate.py")
    assert records["nan_swallow"].candidate_path.endswith("nan_swallow_new.py")


def test_cuda_l1_format(tmp_path: Path) -> None:
    lines = [
        json.dumps(
            {
                "level_id": 1,
                "task_id": 3,
                "ref_code": REFERENCE,
                "custom_code": CANDIDATES["honest"],
            }
        ),
        json.dumps({"level_id": 1, "task_id": 4, "ref_code": REFERENCE, "custom_code": ""}),
        "{not json",
        json.dumps(
            {
                "level_id": 1,
                "task_id": 3,
                "ref_code": REFERENCE,
                "custom_code": CANDIDATES["honest"],
            }
        ),
    ]
    path = tmp_path / "h100.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert detect_format(path) == "cuda-l1"
    records = read_corpus(path)
    assert [r.id for r in records] == ["h100/L1/T3", "h100/L1/T4", "h100/line3", "h100/L1/T3~2"]
    assert records[0].unreadable is None and records[0].source_verdict == "accepted"
    assert records[0].source_ids == {"file": "h100", "line": 1, "level": 1, "task": 3}
    assert "custom_code is empty" in (records[1].unreadable or "")
    assert "not valid JSON" in (records[2].unreadable or "")


def test_kernelbench_run_format(tmp_path: Path) -> None:
    problems = tmp_path / "KernelBench" / "level1"
    problems.mkdir(parents=True)
    (problems / "19_ReLU.py").write_text(REFERENCE)
    run = tmp_path / "runs" / "my_run"
    run.mkdir(parents=True)
    (run / "level_1_problem_19_sample_0_kernel.py").write_text(CANDIDATES["honest"])
    (run / "level_1_problem_19_sample_1_kernel.py").write_text(CANDIDATES["nan_swallow"])
    (run / "level_1_problem_20_sample_0_kernel.py").write_text(CANDIDATES["honest"])
    (run / "eval_results.json").write_text(
        json.dumps(
            {
                "19": [
                    {"sample_id": 0, "compiled": True, "correctness": True},
                    {"sample_id": 1, "compiled": True, "correctness": False},
                ],
            }
        )
    )
    assert detect_format(run) == "kernelbench-run"
    records = read_corpus(run, problems=problems.parent)
    assert [r.id for r in records] == ["my_run/L1/P19/S0", "my_run/L1/P19/S1", "my_run/L1/P20/S0"]
    assert [r.source_verdict for r in records] == ["accepted", "rejected", None]
    assert records[0].reference_path.endswith("19_ReLU.py")
    assert "no reference for level 1 problem 20" in (records[2].unreadable or "")
    result = kernelgate("audit", str(run), "--out", str(tmp_path / "out"), "--limit", "1")
    assert result.returncode == 2 and "--problems" in result.stderr


# -- a complete audit --------------------------------------------------------------------------


def test_audit_writes_a_complete_report(
    local_audit: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    out, result = local_audit
    assert result.returncode == 0, result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["records"] == len(EXPECTED)
    by_id = {row["id"]: row for row in summary["rows"]}
    # a partial audit (--only) says so everywhere: summary, each row, report, command
    assert summary["only"] == [ONLY] and summary["partial"] is True
    assert summary["settings"]["only"] == [ONLY]
    assert {tuple(r["only"]) for r in summary["rows"] if r["verdict"] != "unreadable"} == {(ONLY,)}
    assert "PARTIAL AUDIT: only EXC-01 ran" in result.stdout
    assert "partial audit, only EXC-01" in " ".join(result.stderr.split())
    assert by_id["honest"]["replay"].endswith(f"--only {ONLY}")
    assert summary["gates"]["CMP-01"] == {
        "kind": "thresholded",
        "pass": 0,
        "fail": 0,
        "skipped": 4,
        "failure_rate": None,
        "median_s": None,  # a gate no record ran took no time
        "total_s": None,
    }
    for record_id, (verdict, old_check) in EXPECTED.items():
        assert (by_id[record_id]["verdict"], by_id[record_id]["old_check"]) == (
            verdict,
            old_check,
        ), record_id
    # other gates may join as kernelgate grows; these are the ones that must catch each defect
    assert "EXC-01" in by_id["nan_swallow"]["failed_gates"]
    assert summary["gates"]["EXC-01"]["median_s"] > 0  # where the judging time went
    assert "RES-01" in by_id["crash"]["failed_gates"]
    assert "RES-01" in by_id["hang"]["failed_gates"]
    assert (
        by_id["syntax_error"]["stage"] == "load"
        and "syntax error" in by_id["syntax_error"]["reason"]
    )
    assert summary["contract"] == {
        "verified": 1,
        "narrowed": 0,
        "rejected": 5,
        "unreadable": 1,
        "error": 0,
    }
    assert summary["old_check"] == {"accepted": 2, "rejected": 4, "not-run": 1, "error": 0}
    # the check's own wall time, for judge_speed.py --from-audit (no earlier attempt here)
    assert stored_rows(out)["nan_swallow"]["old_check_seconds"] > 0
    assert summary["disagreement"] == {
        "old_accepts_contract_verified": 1,
        "old_accepts_contract_narrowed": 0,
        "old_accepts_contract_rejected": 1,
        "old_rejects_contract_verified": 0,
        "old_rejects_contract_narrowed": 0,
        "old_rejects_contract_rejected": 4,
        "excluded": 1,
    }
    assert summary["gates"]["EXC-01"]["fail"] == 1
    assert summary["compile"]["loaded"] == 4 and summary["compile"]["attempted"] == 6
    assert summary["time"]["median_s"] > 0 and summary["coverage"]["dtypes"]["float32"] == 4
    throughput = summary["throughput"]
    assert throughput["runs"] == 1 and throughput["rows_without_run"] == 0
    assert throughput["judged_in_timed_runs"] == 6 and throughput["judged_per_hour"] > 0
    # every rejected record has a replay command that names its files
    replay = by_id["nan_swallow"]["gate_replays"]["EXC-01"]
    assert replay.startswith("kernelgate verify ") and "--only EXC-01" in replay
    assert "IEEE class" in by_id["nan_swallow"]["gate_reasons"]["EXC-01"]  # and why it failed
    report_md = (out / "report.md").read_text()
    html = (out / "report.html").read_text()
    for name in PLOTS:
        assert (out / f"{name}.png").read_bytes().startswith(b"\x89PNG")
    assert html.count("data:image/png;base64,") == len(PLOTS)
    for text in (report_md, html):
        assert "PARTIAL AUDIT: only EXC-01 ran on each record (--only)" in text
        assert "Disagreement matrix" in text and "Modal defect" in text
        assert "nan_swallow" in text and "--only EXC-01" in text
    # the store holds one row per record, and refuses to be reused without --resume
    again = kernelgate("audit", str(out.parent / "corpus"), "--out", str(out))
    assert again.returncode == 2 and "--resume" in again.stderr


def test_audit_usage_errors_exit_two(tmp_path: Path) -> None:
    """Each refused before anything is judged. The first two run the command in this process
    (no CLI start-up, seconds of CPU each); the last, as a user would, in a process of its
    own: its stderr must hold no traceback."""
    from typer.testing import CliRunner

    from kernelgate.cli import app

    missing = CliRunner().invoke(
        app, ["audit", str(tmp_path / "nowhere"), "--out", str(tmp_path / "o")]
    )
    assert missing.exit_code == 2 and "not found" in " ".join(missing.output.split())
    bad_format = CliRunner().invoke(
        app, ["audit", str(tmp_path), "--out", str(tmp_path / "o"), "--format", "zip"]
    )
    assert bad_format.exit_code == 2
    assert "unknown corpus format" in " ".join(bad_format.output.split())
    no_memory = kernelgate(
        "audit", str(tmp_path), "--out", str(tmp_path / "o"), "--host-memory", "0"
    )
    assert no_memory.returncode == 2 and "--host-memory" in no_memory.stderr
    assert "Traceback" not in no_memory.stderr


# -- SIGKILL and --resume ------------------------------------------------------------------------


def test_sigkill_then_resume_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    names = ["honest", "nan_swallow", "syntax_error", "no_modelnew"]
    corpus = write_pairs(tmp_path / "corpus", names)
    out = tmp_path / "out"
    args = [sys.executable, "-m", "kernelgate.cli", *audit_args(corpus, out, "--workers", "1")]
    process = subprocess.Popen(
        args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    store = out / STORE_NAME
    deadline = time.monotonic() + 120
    rows = 0
    while time.monotonic() < deadline and process.poll() is None:
        if store.exists():
            try:
                with sqlite3.connect(store) as db:
                    rows = db.execute("SELECT COUNT(*) FROM rows").fetchone()[0]
            except sqlite3.OperationalError:
                rows = 0
            if rows >= 1:
                break
        time.sleep(0.2)
    assert process.poll() is None, "the audit finished before it could be killed"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert 1 <= rows < len(names)
    # The store travels, as it does between this machine and the device: the corpus and
    # the output folder both land at other paths, and the audit resumes there.
    moved = tmp_path / "elsewhere"
    shutil.copytree(corpus, moved / "corpus")
    shutil.move(out, moved / "out")
    corpus, out, store = moved / "corpus", moved / "out", moved / "out" / STORE_NAME
    resumed = kernelgate(  # --host-memory is the guard's measure only: no verdict depends on it
        *audit_args(corpus, out, "--workers", "2", "--resume", "--host-memory", "64")
    )
    assert resumed.returncode == 0, resumed.stderr
    with sqlite3.connect(store) as db:
        ids = [r[0] for r in db.execute("SELECT id FROM rows")]
        judged_now = [r[0] for r in db.execute("SELECT id FROM rows WHERE run = 2")]
    # stderr is no terminal here, so the resume logs a line per record instead of a bar
    logged = re.findall(r"\[(\d+)/(\d+)\] (\S+): (\w+) \(old check", resumed.stderr)
    assert sorted(name for _, _, name, _ in logged) == sorted(judged_now)
    assert [int(k) for k, _, _, _ in logged] == list(range(1, len(judged_now) + 1))
    assert all(verdict == EXPECTED[name][0] for _, _, name, verdict in logged)
    assert sorted(ids) == sorted(names)
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(row["id"] for row in summary["rows"]) == sorted(names)
    assert {row["id"]: row["verdict"] for row in summary["rows"]} == {
        name: EXPECTED[name][0] for name in names
    }
    # both audit processes are in the run log, and every row belongs to one of them
    assert summary["throughput"]["runs"] == 2 and summary["throughput"]["rows_without_run"] == 0
    # The commands below that judge nothing run in this process (CliRunner): the same
    # command code without a CLI start-up (seconds of CPU each); the ones that judge run
    # as the user would, in a process of their own.
    from typer.testing import CliRunner

    from kernelgate.cli import app

    # the report can be rebuilt from the store alone, without judging anything
    (out / "summary.json").unlink()
    rebuilt = CliRunner().invoke(app, ["audit-report", str(out)])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert json.loads((out / "summary.json").read_text())["rows"] == summary["rows"]
    # --retry-errors judges again a record whose judge failed (here: a row made an error)
    with sqlite3.connect(store) as db:
        data = json.loads(db.execute("SELECT data FROM rows WHERE id = 'honest'").fetchone()[0])
        data["verdict"] = "error"
        db.execute("UPDATE rows SET data = ? WHERE id = 'honest'", (json.dumps(data),))
    retried = kernelgate(*audit_args(corpus, out, "--resume", "--retry-errors"))
    assert retried.returncode == 0, retried.stderr
    rows = json.loads((out / "summary.json").read_text())["rows"]
    assert [row["verdict"] for row in rows if row["id"] == "honest"] == [EXPECTED["honest"][0]]
    assert sorted(row["id"] for row in rows) == sorted(names)
    # --rejudge GATE judges again the records that gate failed (after a change to it)
    rejudged = kernelgate(*audit_args(corpus, out, "--resume", "--rejudge", "EXC-01"))
    assert rejudged.returncode == 0, rejudged.stderr
    assert "3 already in the store" in " ".join(rejudged.stderr.split())  # nan_swallow forgot
    rows = json.loads((out / "summary.json").read_text())["rows"]
    assert sorted(row["id"] for row in rows) == sorted(names)
    assert "EXC-01" in next(r for r in rows if r["id"] == "nan_swallow")["failed_gates"]
    unknown = CliRunner().invoke(
        app, ["audit", str(corpus), "--out", str(out), "--resume", "--rejudge", "X-9"]
    )
    assert unknown.exit_code == 2 and "unknown gate" in " ".join(unknown.output.split())
    # a resume that would run other gates (a full audit here) would mix rows of two
    # selections: refused, naming what differs; an unknown gate for --only is a usage error
    # (both refused before any judge starts)
    full = audit_command(corpus, out, "--resume")
    other_gates = CliRunner().invoke(app, full)
    assert other_gates.exit_code == 2
    assert "other settings (only differ)" in " ".join(other_gates.output.split())
    bad_only = CliRunner().invoke(app, audit_args(corpus, out, "--resume", "--only", "EXC-01,X-9"))
    assert bad_only.exit_code == 2
    assert "unknown gate(s) for --only: X-9" in " ".join(bad_only.output.split())
    assert stored_rows(out).keys() == set(names)  # neither touched the store
    # a resume on other records (the corpus changed) is refused, naming what differs
    (corpus / "honest" / "candidate.py").write_text("# changed\n")
    refused = CliRunner().invoke(app, ["audit", str(corpus), "--out", str(out), "--resume"])
    assert refused.exit_code == 2 and "source_sha256" in " ".join(refused.output.split())


# -- SIGINT, SIGTERM and --resume ------------------------------------------------------------------

STOP_LIMIT = 10.0  # seconds from the signal to the audit's exit
INTERRUPTED = re.compile(
    r"audit interrupted by (SIG\w+): (\d+) row\(s\) kept in \S+, (\d+) record\(s\) left; "
    r"(.*); resume with: (kernelgate audit .* --resume)$",
    re.MULTILINE,
)


def blocker_source(flag: Path) -> str:
    """A candidate whose import waits while ``flag`` exists (its judge busy, with the old
    check's child, in a session of its own, loading it), then defines no ModelNew."""
    return (
        "import os\nimport time\n\n"
        f"while os.path.exists({str(flag)!r}):  # held until the test lets go\n"
        "    time.sleep(0.05)\n"
    )


def marked_processes(mark: str) -> list[str]:
    """Processes (other than this one) whose environment holds ``mark``: every process an
    audit started with it inherits it (judges, old checks, candidates' workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if mark.encode() in (entry / "environ").read_bytes():
                found.append(f"{entry.name}: {(entry / 'cmdline').read_bytes()[:120]!r}")
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def stop_running_audit(
    args: list[str], out: Path, signum: int, mark: str, *, more_than: int
) -> tuple[subprocess.CompletedProcess[str], float, set[str]]:
    """Start ``kernelgate ARGS``, wait until the store in ``out`` holds more than
    ``more_than`` rows, send ``signum``; the finished process, seconds from the signal to
    its exit, and the rows stored when the signal was sent."""
    process = subprocess.Popen(
        [sys.executable, "-m", "kernelgate.cli", *args],
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200", "KERNELGATE_TEST_MARK": mark},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # as a terminal's foreground job: its own process group
    )
    try:
        deadline = time.monotonic() + 180
        seen: set[str] = set()
        while time.monotonic() < deadline and process.poll() is None and len(seen) <= more_than:
            time.sleep(0.2)
            with contextlib.suppress(sqlite3.OperationalError):
                seen = set(stored_rows(out)) if (out / STORE_NAME).exists() else set()
        if process.poll() is not None:
            pytest.fail(f"the audit ended before the signal: {process.communicate()[1]}")
        assert len(seen) > more_than, "no new row within 180 s"
        os.killpg(process.pid, signum)  # what Ctrl-C does: the whole foreground group
        sent = time.monotonic()
        try:
            stdout, stderr = process.communicate(timeout=STOP_LIMIT)
        except subprocess.TimeoutExpired:
            process.kill()
            stdout, stderr = process.communicate()
            pytest.fail(f"the audit did not stop within {STOP_LIMIT:g} s of {signum}:\n{stderr}")
        finished = subprocess.CompletedProcess(args, process.returncode, stdout, stderr)
        return finished, time.monotonic() - sent, seen
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_sigint_and_sigterm_stop_an_audit_that_resumes_without_loss_or_duplicate(
    tmp_path: Path,
) -> None:
    """Ctrl-C (SIGINT to the foreground group), then SIGTERM on the resumed audit: each stops
    within 10 s with the right exit code and one line, kills every judge with its tree,
    keeps every stored row and stores none for the record being judged; the last resume
    completes the audit with every record exactly once."""
    names = ["no_modelnew", "syntax_error"]
    corpus = write_pairs(tmp_path / "corpus", names)
    flag = tmp_path / "hold"
    flag.write_text("")
    (corpus / "blocker").mkdir()  # first in corpus order: judged from the start
    (corpus / "blocker" / "reference.py").write_text(REFERENCE)
    (corpus / "blocker" / "candidate.py").write_text(blocker_source(flag))
    # one worker holds the blocker, the other judges the rest one at a time: a row for each
    # stop (the record after it is being judged when the signal comes)
    everyone = sorted(["blocker", *names])
    out = tmp_path / "out"
    store = out / STORE_NAME
    args = audit_args(corpus, out, "--workers", "2")
    kept: set[str] = set()
    for signum, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        mark = f"kernelgate-interrupt-test-{os.getpid()}-{signum}"
        stopped, seconds, seen = stop_running_audit(args, out, signum, mark, more_than=len(kept))
        assert stopped.returncode == code, stopped.stderr
        assert seconds < STOP_LIMIT
        lines = INTERRUPTED.findall(stopped.stderr)
        assert len(lines) == 1, stopped.stderr
        name, rows_kept, left, report, resume = lines[0]
        rows = stored_rows(out)
        assert name == signal.Signals(signum).name
        assert int(rows_kept) == len(rows) and int(left) == len(everyone) - len(rows)
        assert seen <= set(rows) and kept < set(rows)  # nothing stored before was lost
        # the record being judged (held in its import) has no row, nor counts as deferred
        assert "blocker" not in rows and deferred_count(out) == 0
        assert not any(row.get("interrupted") for row in rows.values())
        if report.startswith("report of the rows kept"):
            summary = json.loads((out / "summary.json").read_text())
            assert sorted(row["id"] for row in summary["rows"]) == sorted(rows)
        else:
            assert f"kernelgate audit-report {out}" in report
        time.sleep(0.5)  # SIGKILLed processes are gone at once; a moment for /proc
        assert marked_processes(mark) == [], "processes outlived the audit"
        words = shlex.split(resume)
        assert words[:2] == ["kernelgate", "audit"] and "--resume" in words
        args, kept = words[1:], set(rows)  # run as python -m kernelgate.cli
    flag.unlink()  # the blocker loads now (and is rejected: it defines no ModelNew)
    resumed = kernelgate(*args)
    assert resumed.returncode == 0, resumed.stderr
    with sqlite3.connect(store) as db:
        ids = [r[0] for r in db.execute("SELECT id FROM rows")]
    assert sorted(ids) == everyone  # every record once: none lost, none twice
    summary = json.loads((out / "summary.json").read_text())
    assert summary["without_row"] == [] and summary["records"] == len(everyone)
    assert {row["id"]: row["verdict"] for row in summary["rows"]} == dict.fromkeys(
        everyone, "rejected"
    )
    assert summary["throughput"]["runs"] == 3


def test_rows_that_arrive_after_a_stop_are_neither_stored_nor_deferred(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner's side of a stop, without processes: after the signal, a killed judge's
    row (SIGKILL, which otherwise defers the record for memory) and a finished one are both
    left out, no other pool starts, and ``AuditInterrupted`` counts what was kept."""
    from kernelgate.audit import runner
    from kernelgate.audit.interrupt import AuditInterrupted
    from kernelgate.audit.judge import base_row, error_row

    pools: list[int] = []
    stored = threading.Event()  # the first row is in the store when the signal comes

    class StoppedMidway:
        def __init__(self, workers: int, interruption: Any) -> None:
            self.workers, self.description = workers, f"fake, {workers}"
            self.interruption = interruption

        def judge_all(self, records, options):
            pools.append(self.workers)
            first, killed, late = records
            yield first, base_row(first) | {"verdict": "verified", "stage": "gates"}
            assert stored.wait(30)
            self.interruption.stop(signal.SIGTERM)  # as the handler does
            yield killed, error_row(killed, "judge killed", 1.0, judge_exit=-signal.SIGKILL)
            yield late, base_row(late) | {"verdict": "verified", "stage": "gates"}

        def close(self) -> None:
            pass

    monkeypatch.setattr(
        runner,
        "make_executor",
        lambda kind, *, workers, interruption, **_: StoppedMidway(workers or 2, interruption),
    )
    corpus = write_pairs(tmp_path / "corpus", ["crash", "honest", "nan_swallow"])
    out = tmp_path / "out"
    handler = signal.getsignal(signal.SIGINT)
    with pytest.raises(AuditInterrupted) as stopped:
        runner.run_audit(corpus, out, workers=2, on_row=lambda row: stored.set())
    assert stopped.value.signal_name == "SIGTERM" and stopped.value.exit_code == 143
    assert (stopped.value.rows_kept, stopped.value.records_left) == (1, 2)
    assert list(stored_rows(out)) == ["crash"] and deferred_count(out) == 0
    assert pools == [2]  # the killed judge's record was not judged again with fewer beside
    if stopped.value.report_written:
        summary = json.loads((out / "summary.json").read_text())
        assert [row["id"] for row in summary["rows"]] == ["crash"]
        assert summary["without_row"] == ["honest", "nan_swallow"]
    assert signal.getsignal(signal.SIGINT) == handler  # the audit's handler is gone with it


def test_a_signal_before_judging_begins_stops_the_audit_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before any judge runs there is nothing to kill: the handler raises at once, wherever
    the audit is (here reading the corpus), and nothing is stored or started."""
    from kernelgate.audit import runner
    from kernelgate.audit.interrupt import AuditInterrupted

    started: list[int] = []
    monkeypatch.setattr(
        runner, "make_executor", lambda kind, *, workers, **_: started.append(workers)
    )
    reading = runner.read_corpus

    def read_then_signal(*args: Any, **kwargs: Any) -> Any:
        records = reading(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises in here, long before this ends
        return records

    monkeypatch.setattr(runner, "read_corpus", read_then_signal)
    corpus = write_pairs(tmp_path / "corpus", ["honest"])
    handler = signal.getsignal(signal.SIGTERM)
    began = time.monotonic()
    with pytest.raises(AuditInterrupted) as stopped:
        runner.run_audit(corpus, tmp_path / "out")
    assert time.monotonic() - began < 4
    assert stopped.value.exit_code == 143 and stopped.value.rows_kept is None
    assert started == [] and not (tmp_path / "out").exists()
    assert signal.getsignal(signal.SIGTERM) == handler  # the audit's handler is gone with it


def test_a_stop_kills_a_judge_tree_across_sessions_and_refuses_new_judges() -> None:
    from kernelgate.audit.interrupt import AuditInterrupted, Interruption
    from kernelgate.audit.processes import children_map

    interruption = Interruption()
    judge = interruption.launch(
        lambda: subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import subprocess, time\n"
                "subprocess.Popen(['sleep', '60'], start_new_session=True)\n"
                "time.sleep(60)\n",
            ]
        )
    )
    assert judge is not None
    deadline = time.monotonic() + 30
    while not children_map().get(judge.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    (worker,) = children_map()[judge.pid]  # in a session of its own, as candidates' workers
    interruption.stop(signal.SIGINT)
    assert judge.wait(timeout=5) == -signal.SIGKILL
    interruption.finished(judge.pid)
    assert gone(worker), "the worker outlived its judge"
    assert interruption.launch(lambda: pytest.fail("a judge started after the stop")) is None
    with pytest.raises(AuditInterrupted) as stopped:
        interruption.check()
    assert stopped.value.exit_code == 130 and interruption.running() == 0


def test_a_judge_adopts_what_a_candidate_double_forks_and_its_tree_is_killed() -> None:
    """A daemon's escape (fork twice, the middle process exits) would hand the grandchild to
    init, out of every tree kill_tree walks; a judge is a subreaper, so it stays in the
    judge's tree and dies with it."""
    from kernelgate.audit.processes import kill_tree

    judge = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import importlib.util, subprocess, sys, time\n"
            # processes.py alone: the kernelgate package would import torch (seconds)
            "spec = importlib.util.spec_from_file_location('processes', sys.argv[1])\n"
            "processes = importlib.util.module_from_spec(spec)\n"
            "spec.loader.exec_module(processes)\n"
            "processes.become_subreaper()\n"
            "print(subprocess.run(['sh', '-c', 'sleep 60 >/dev/null 2>&1 & echo $!'],"
            " capture_output=True, text=True).stdout, flush=True)\n"
            "time.sleep(60)\n",
            str(ROOT / "src" / "kernelgate" / "audit" / "processes.py"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        escaped = int(judge.stdout.readline())  # its parent, sh, has exited
        stat = Path(f"/proc/{escaped}/stat").read_text()
        assert int(stat[stat.rfind(")") + 2 :].split()[1]) == judge.pid  # adopted
        kill_tree(judge.pid)
        assert judge.wait(timeout=5) == -signal.SIGKILL
        assert gone(escaped), "the double-forked process outlived its judge"
    finally:
        judge.kill()
        judge.wait()


def test_a_judges_last_act_returns_only_once_its_descendants_are_reaped() -> None:
    """``kill_descendants`` waits for what it killed: a judge that exited while a killed
    child was still dying would leave it running after its caller saw the judge return
    (the hostile suite's "outlived" under load). Right after the call, neither the child
    nor a double-forked grandchild it adopted is in /proc at all (a zombie would be)."""
    script = (
        "import importlib.util, json, os, subprocess, sys\n"
        "spec = importlib.util.spec_from_file_location('processes', sys.argv[1])\n"
        "processes = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(processes)\n"
        "processes.become_subreaper()\n"
        "child = subprocess.Popen(['sleep', '60'])\n"
        "escaped = int(subprocess.run(['sh', '-c', 'sleep 60 >/dev/null 2>&1 & echo $!'],"
        " capture_output=True, text=True).stdout)\n"
        "left = processes.kill_descendants()\n"
        "print(json.dumps({'left': left, 'present': [os.path.exists(f'/proc/{p}')"
        " for p in (child.pid, escaped)]}))\n"
    )
    judge = subprocess.run(
        [sys.executable, "-c", script, str(ROOT / "src" / "kernelgate" / "audit" / "processes.py")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert judge.returncode == 0, judge.stderr
    seen = json.loads(judge.stdout)
    assert seen == {"left": [], "present": [False, False]}


def test_the_resume_command_repeats_the_audit_but_not_what_it_forgot() -> None:
    from kernelgate.audit.command import resume_command

    command = resume_command(
        Path("corpus dir/h100.jsonl"),
        Path("out"),
        fmt="cuda-l1",
        problems=None,
        device="cuda",
        workers=10,
        executor="local",
        ray_address=None,
        limit=None,
        timeout=2.0,
        host_memory=256.0,
    )
    assert shlex.split(command) == [
        "kernelgate",
        "audit",
        "corpus dir/h100.jsonl",
        "--out",
        "out",
        "--format",
        "cuda-l1",
        "--device",
        "cuda",
        "--workers",
        "10",
        "--timeout",
        "2",
        "--host-memory",
        "256",
        "--resume",
    ]
    partial = resume_command(
        Path("out"),
        Path("out2"),
        fmt="auto",
        problems=None,
        device="cpu",
        workers=None,
        executor="local",
        ray_address=None,
        limit=None,
        timeout=60.0,
        host_memory=None,
        only=("CMP-01", "EXC-01"),
    )
    assert shlex.split(partial)[-3:] == ["--only", "CMP-01,EXC-01", "--resume"]
    # and so does the command that judges again records whose evidence changed
    from kernelgate.audit.integrity import rejudge_command

    settings = {"source": "c", "format": "pairs", "device": "cpu", "timeout": 2, "only": ["EXC-01"]}
    assert rejudge_command(Path("out"), settings, ["r"]).endswith(
        "--timeout 2 --only EXC-01 --resume --rejudge-record r"
    )


# -- the Ray executor ----------------------------------------------------------------------------


def test_ray_executor_matches_local(
    corpus: Path, local_audit: tuple[Path, subprocess.CompletedProcess[str]]
) -> None:
    pytest.importorskip("ray", reason="ray is not installed (pip install 'kernelgate[ray]')")
    out = corpus.parent / "ray"
    result = kernelgate(*audit_args(corpus, out, "--executor", "ray", "--workers", "2"))
    assert result.returncode == 0, result.stderr
    assert "ray (local)" in result.stderr
    local = json.loads((local_audit[0] / "summary.json").read_text())
    remote = json.loads((out / "summary.json").read_text())
    assert outcomes(remote) == outcomes(local)


@pytest.fixture(scope="module")
def retried_alone_audit(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """One audit (two workers) of an honest record beside two that fail in the pool for
    reasons that may be their neighbours': ``killed``, whose reference SIGKILLs its judge
    every time (as the OOM killer would), and ``greedy``, whose candidate raises CUDA's
    out-of-memory error. Both retries to judge alone are independent of each other, so
    one audit serves the two tests below (one CLI start-up and one honest judge fewer):
    the audit folder (``judge-starts.txt``: a line per start of ``killed``'s judge) and
    the finished command."""
    root = tmp_path_factory.mktemp("retried-alone")
    corpus = write_pairs(root / "corpus", ["honest"])
    counter = root / "judge-starts.txt"
    killer = corpus / "killed"
    killer.mkdir()
    (killer / "reference.py").write_text(
        "import os, signal, sys\n"
        "if sys.argv[0].endswith('judge.py'):  # the judge process, not the old check's\n"
        f"    open({str(counter)!r}, 'a').write('start\\n')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n" + REFERENCE
    )
    (killer / "candidate.py").write_text(CANDIDATES["honest"])
    greedy = corpus / "greedy"
    greedy.mkdir()
    (greedy / "reference.py").write_text(REFERENCE)
    (greedy / "candidate.py").write_text(
        "import torch\nimport torch.nn as nn\n\nclass ModelNew(nn.Module):\n"
        "    def forward(self, x):\n"
        "        raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2 GiB')\n"
    )
    out = root / "out"
    return root, kernelgate(*audit_args(corpus, out, "--workers", "2"))


def test_a_judge_killed_from_outside_is_judged_again_alone(
    retried_alone_audit: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """The OOM killer takes a judge when several big records meet: its record is judged once
    more after the others, with the machine to itself, and keeps an error row only if that
    fails too (here the reference kills its judge every time)."""
    root, result = retried_alone_audit
    assert result.returncode == 0, result.stderr
    rows = {
        row["id"]: row for row in json.loads((root / "out" / "summary.json").read_text())["rows"]
    }
    assert rows["honest"]["verdict"] == EXPECTED["honest"][0]
    assert rows["killed"]["verdict"] == "error" and "signal 9" in rows["killed"]["reason"]
    assert (root / "judge-starts.txt").read_text().count("start") == 2  # in the pool, then alone


def test_a_record_out_of_device_memory_beside_others_is_judged_again_alone(
    retried_alone_audit: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """CUDA's out-of-memory error beside other judges on one GPU may be theirs: the record
    is judged once more alone, and that verdict stands (here the candidate raises it always,
    so it is rejected by RES-01 either way)."""
    root, result = retried_alone_audit
    assert result.returncode == 0, result.stderr
    rows = stored_rows(root / "out")
    assert rows["greedy"]["judged_alone"] and rows["greedy"]["device_memory_incident"]
    assert rows["greedy"]["verdict"] == "rejected" and "RES-01" in rows["greedy"]["failed_gates"]
    assert not rows["honest"].get("judged_alone") and rows["honest"]["verdict"] == "verified"


def test_a_candidate_that_cannot_load_on_a_full_gpu_is_judged_again_alone(
    tmp_path: Path,
) -> None:
    """A load that fails for want of GPU memory says nothing of the candidate while other
    judges share the GPU: judged again alone, and the store's retry picks such rows too."""
    corpus = write_pairs(tmp_path / "corpus", ["honest"])
    starved = corpus / "starved"
    starved.mkdir()
    (starved / "reference.py").write_text(REFERENCE)
    (starved / "candidate.py").write_text(
        "raise RuntimeError('CUDA error: out of memory')\n" + CANDIDATES["honest"]
    )
    out = tmp_path / "out"
    args = audit_args(corpus, out, "--workers", "2")
    assert kernelgate(*args).returncode == 0
    with sqlite3.connect(out / STORE_NAME) as db:
        row = json.loads(db.execute("SELECT data FROM rows WHERE id = 'starved'").fetchone()[0])
    assert row["judged_alone"] and row["stage"] == "load" and row["verdict"] == "rejected"
    result = kernelgate(*args, "--resume", "--retry-errors")
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(out / STORE_NAME) as db:
        rows = {i: (r, json.loads(d)) for i, r, d in db.execute("SELECT id, run, data FROM rows")}
    assert deferred_count(out) == 0
    assert {i: r for i, (r, _) in rows.items()} == {"honest": 1, "starved": 2}
    assert rows["starved"][1]["judged_alone"]  # retried alone, not in the pool again


def test_a_record_deferred_to_be_judged_alone_stays_deferred_across_a_resume(
    tmp_path: Path,
) -> None:
    """A run stopped before its alone phase leaves the deferred record without a row; the
    resume judges it alone, not in the pool."""
    corpus = write_pairs(tmp_path / "corpus", ["honest", "nan_swallow"])
    out = tmp_path / "out"
    args = audit_args(corpus, out, "--workers", "2")
    assert kernelgate(*args, "--limit", "1").returncode == 0
    from kernelgate.audit.store import ResultStore

    store = ResultStore(out / STORE_NAME)
    (first,) = store.done_ids()
    (second,) = {"honest", "nan_swallow"} - {first}
    unfinished = json.loads((out / "summary.json").read_text())
    assert unfinished["without_row"] == [second] and unfinished["corpus_records"] == 2
    assert (
        f"1 of 2 records (not finished: 1 without a row yet, {second};"
        in (out / "report.md").read_text()
    )
    store.defer_alone(second, "test: deferred by a stopped run")
    assert store.alone_ids() == {second}
    store.close()
    result = kernelgate(*args, "--resume")
    assert result.returncode == 0, result.stderr
    rows = stored_rows(out)
    assert deferred_count(out) == 0
    finished = json.loads((out / "summary.json").read_text())
    assert finished["without_row"] == [] and "2 records." in (out / "report.md").read_text()
    assert rows[second].get("judged_alone") and not rows[first].get("judged_alone")
    assert rows[second]["verdict"] == EXPECTED[second][0]
    peak = rows[second]["peak_memory"]  # for planning how many judges a machine holds
    assert peak["judge_rss_bytes"] > 50 * 2**20 and peak["children_rss_bytes"] > 0
    assert peak["judge_gpu_reserved_bytes"] is None  # CPU mode: no allocator was used
    assert peak["judge_gpu_allocated_bytes"] is None


def test_a_run_that_judged_nothing_still_counts_its_wall_time(tmp_path: Path) -> None:
    """A run killed while every judge is still busy leaves no row: its heartbeat alone says
    how long it ran, and the throughput counts that time (no row-less run is free)."""
    from kernelgate.audit.report import throughput
    from kernelgate.audit.store import ResultStore

    store = ResultStore.open(tmp_path, resume=False, settings={"source_sha256": "x"})
    store.begin_run({"workers": 3})
    with store.heartbeat(interval=0.05):
        time.sleep(0.3)
    (run,) = store.runs()
    store.close()
    assert run["rows"] == 0 and run["last_row"] is None
    assert run["last_seen"] - run["started"] >= 0.25
    figures = throughput([run], records=0)
    assert figures["per_run"][0]["wall_s"] is not None and figures["wall_hours"] > 0
    assert figures["judged_per_hour"] == 0


def test_report_paths_into_the_audit_folder_are_relative_to_it() -> None:
    """A store judged on the device names that machine's paths; the report names the work
    folders relative to the audit folder, so its replays work wherever it is carried, and
    leaves paths outside it (a pairs corpus's own files) as they are."""
    from kernelgate.audit.report import _local_paths

    judged = (
        "kernelgate verify /root/x/.devdata/audit/records/h100_L1_T3-1a2b3c4d/reference.py "
        "/root/x/.devdata/audit/records/h100_L1_T3-1a2b3c4d/candidate.py --only EXC-01"
    )
    assert _local_paths(judged) == (
        "kernelgate verify records/h100_L1_T3-1a2b3c4d/reference.py "
        "records/h100_L1_T3-1a2b3c4d/candidate.py --only EXC-01"
    )
    outside = "kernelgate verify /corpus/honest/reference.py /corpus/records/candidate.py"
    assert _local_paths(outside) == outside
    assert _local_paths(None) is None


def test_records_deferred_for_memory_are_retried_a_few_at_a_time_then_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pool's memory failures are judged again a quarter of the pool at a time, and what
    still fails there alone: a big record finishes beside one other, a huge one only alone,
    and each row says how many judged beside it."""
    from kernelgate.audit import runner
    from kernelgate.audit.judge import error_row

    fits_beside = {"honest": 8, "nan_swallow": 2, "crash": 1}  # most judges at once

    def judge(record, workers: int) -> dict[str, Any] | None:
        if workers <= fits_beside[record.id]:
            return None  # verified
        return error_row(record, "CUDA out of memory", 1.0) | {"device_memory_incident": True}

    calls = fake_executors(monkeypatch, judge)
    corpus = write_pairs(tmp_path / "corpus", list(fits_beside))
    runner.run_audit(corpus, tmp_path / "out", workers=8)
    assert calls == [
        (8, ["crash", "honest", "nan_swallow"]),
        (2, ["crash", "nan_swallow"]),
        (1, ["crash"]),
    ]
    rows = stored_rows(tmp_path / "out")
    assert deferred_count(tmp_path / "out") == 0
    assert {i: (r["verdict"], r.get("retry_pool")) for i, r in rows.items()} == {
        "honest": ("verified", None),
        "nan_swallow": ("verified", 2),
        "crash": ("verified", 1),
    }
    assert rows["crash"]["judged_alone"] and not rows["nan_swallow"]["judged_alone"]


def test_a_judge_killed_mid_record_resumes_at_its_next_gate(tmp_path: Path) -> None:
    """A judge killed from outside half-way through its gates (the deadline of a device
    call, the OOM killer) loses nothing it finished: the retry takes the old check and the
    finished gates from the record's work folder and runs only the rest. Here the candidate
    kills its judge on its 12th call (in CMP-02), once."""
    calls, kills, old_checks = (tmp_path / name for name in ("calls", "kills", "old-checks"))
    killer = (
        "import os, signal, sys\n"
        "if sys.argv[0].endswith('oldcheck.py'):\n"
        f"    open({str(old_checks)!r}, 'a').write('x')\n"
        "def _count():\n"
        "    if not sys.argv[0].endswith('worker.py'):\n"
        "        return\n"
        f"    open({str(calls)!r}, 'a').write('x')\n"
        f"    if len(open({str(calls)!r}).read()) == 12 and not os.path.exists({str(kills)!r}):\n"
        f"        open({str(kills)!r}, 'w').write('killed')\n"
        "        os.kill(os.getppid(), signal.SIGKILL)\n"
    )
    corpus = tmp_path / "corpus" / "killer"
    corpus.mkdir(parents=True)
    (corpus / "reference.py").write_text(REFERENCE)
    (corpus / "candidate.py").write_text(
        killer + CANDIDATES["honest"].replace("return torch", "_count()\n        return torch")
    )
    out = tmp_path / "out"
    # The candidate stands in for a killer from outside, which confinement rightly stops
    # (tests/test_confine.py, tests/test_hostile.py): this test is about the resume. It
    # needs the gates up to the one the judge is killed in and the next one (whose trace
    # is looked at below), not the rest: a partial audit, whose journal resumes as well.
    # Its workers start fresh: a worker forked from the worker fork server is the server's
    # child, and the stand-in killer's getppid() would name the server, not the judge.
    result = kernelgate(
        *audit_command(corpus.parent, out, "--workers", "2", "--only", "CMP-01,CMP-02,CMP-03"),
        env={"KERNELGATE_ISOLATION": "off", "KERNELGATE_WORKER_FORK": "0"},
    )
    assert result.returncode == 0, result.stderr
    row = stored_rows(out)["killer"]
    assert kills.exists() and row["judged_alone"]
    assert row["verdict"] == "verified" and row["old_check"] == "accepted"
    assert row["old_check_seconds"] is None  # the retry took the first attempt's check
    resumed = row["resumed_gates"]  # the gates finished before the 12th call, in order
    assert 0 < len(resumed) < len(GATE_IDS) and resumed == list(GATE_IDS[: len(resumed)])
    assert row["only"] == ["CMP-01", "CMP-02", "CMP-03"]
    assert old_checks.read_text() == "x"  # one old check: the retry took its result
    work = next((out / "records").iterdir())
    assert not (work / "gates.jsonl").exists() and not (work / "old_check.json").exists()
    log = (work / "judge.log").read_text()
    assert "CMP-02 started" in log and "old check accepted" in log
    # the trace down to each candidate call and oracle evaluation: where a slow judge was
    assert re.search(r"CMP-03 candidate \[.+\] \d+\.\d s", log), log
    assert re.search(r"CMP-03 expected \[.+\] \d+\.\d s", log)


def test_records_an_earlier_run_deferred_start_at_once_beside_the_rest_on_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind a pool that a deadline stops, records deferred for memory would never start;
    before it, the machine would idle while they finish. A resume judges them a few at a
    time beside a pool of the remaining workers that judges the rest: here the deferred
    record's judge waits for the other pool's first judge, which only happens side by side."""
    from kernelgate.audit import runner
    from kernelgate.audit.judge import error_row
    from kernelgate.audit.store import ResultStore

    other_pool_started = threading.Event()

    def judge(record, workers: int) -> dict[str, Any] | None:
        if record.id != "crash":
            other_pool_started.set()
            return None
        if other_pool_started.wait(timeout=10):
            return None
        return error_row(record, "judged before the other pool started", 0.0)

    calls = fake_executors(monkeypatch, judge)
    corpus = write_pairs(tmp_path / "corpus", ["honest", "nan_swallow", "crash"])
    out = tmp_path / "out"
    runner.run_audit(corpus, out, workers=8, limit=0)  # a store with no rows yet
    calls.clear()
    store = ResultStore(out / STORE_NAME)
    store.defer_alone("crash", "test: out of memory beside others in an earlier run")
    store.close()
    runner.run_audit(corpus, out, workers=8, resume=True)
    assert sorted(calls) == [(2, ["crash"]), (6, ["honest", "nan_swallow"])]
    rows = stored_rows(out)
    assert rows["crash"]["verdict"] == "verified", rows["crash"].get("reason")
    assert rows["crash"]["retry_pool"] == 2 and deferred_count(out) == 0
    assert not rows["crash"]["judged_alone"] and "retry_pool" not in rows["honest"]


def test_an_earlier_run_deferred_record_that_fails_beside_the_pool_is_judged_alone_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deferred record out of memory again beside the pool is judged alone, once both
    pools have finished, and never a third time a few at a time."""
    from kernelgate.audit import runner
    from kernelgate.audit.judge import error_row
    from kernelgate.audit.store import ResultStore

    def judge(record, workers: int) -> dict[str, Any] | None:
        if record.id == "crash" and workers > 1:
            return error_row(record, "CUDA out of memory", 1.0) | {"device_memory_incident": True}
        return None

    calls = fake_executors(monkeypatch, judge)
    corpus = write_pairs(tmp_path / "corpus", ["honest", "nan_swallow", "crash"])
    out = tmp_path / "out"
    runner.run_audit(corpus, out, workers=8, limit=0)
    calls.clear()
    store = ResultStore(out / STORE_NAME)
    store.defer_alone("crash", "test: out of memory beside others in an earlier run")
    store.close()
    runner.run_audit(corpus, out, workers=8, resume=True)
    assert sorted(calls[:2]) == [(2, ["crash"]), (6, ["honest", "nan_swallow"])]
    assert calls[2:] == [(1, ["crash"])]
    rows = stored_rows(out)
    assert rows["crash"]["judged_alone"] and rows["crash"]["verdict"] == "verified"
    assert deferred_count(out) == 0


def test_rejudge_record_judges_those_records_again_and_names_unknown_ids(
    two_record_audit: Path, tmp_path: Path
) -> None:
    """After a change that concerns some records (the oracle's, say), those are judged again
    and the rest kept; an id the corpus lacks is a usage error that says what ids look like.
    (A copy of a finished complete audit of both records: ``conftest.two_record_audit``.)"""
    corpus, out = copy_audit(two_record_audit, tmp_path / "audit")
    args = audit_command(corpus, out, "--workers", "2")
    assert stored_rows(out).keys() == {"honest", "nan_swallow"}
    wrong = kernelgate(*args, "--resume", "--rejudge-record", "honset")
    assert wrong.returncode == 2 and "no record with id 'honset'" in wrong.stderr
    assert "Traceback" not in wrong.stderr
    result = kernelgate(*args, "--resume", "--rejudge-record", "nan_swallow")
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(out / STORE_NAME) as db:
        runs = dict(db.execute("SELECT id, run FROM rows").fetchall())
    assert runs == {"honest": 1, "nan_swallow": 2}
    assert stored_rows(out)["nan_swallow"]["verdict"] == EXPECTED["nan_swallow"][0]


def test_a_finished_judge_whose_row_was_not_stored_is_not_judged_again(
    two_record_audit: Path, tmp_path: Path
) -> None:
    """A deadline's SIGKILL can land after a judge wrote its result and before the audit
    stored it: the resume stores that result instead of judging the record again, while a
    row the audit forgets on purpose (--rejudge-record) is judged afresh. (A copy of a
    finished complete audit of both records: ``conftest.two_record_audit``.)"""
    corpus, out = copy_audit(two_record_audit, tmp_path / "audit")
    args = audit_command(corpus, out, "--workers", "2")
    first = stored_rows(out)["honest"]
    log = next(p for p in (out / "records").iterdir() if p.name.startswith("honest")) / "judge.log"
    judged_at = log.read_text()
    with sqlite3.connect(out / STORE_NAME) as db:  # the row the killed audit never stored
        db.execute("DELETE FROM rows WHERE id = 'honest'")
    result = kernelgate(*args, "--resume")
    assert result.returncode == 0, result.stderr
    recovered = stored_rows(out)["honest"]
    assert recovered["recovered_result"] and log.read_text() == judged_at  # no judge ran
    assert {k: v for k, v in recovered.items() if k != "recovered_result"} == first
    again = kernelgate(*args, "--resume", "--rejudge-record", "honest")
    assert again.returncode == 0, again.stderr
    rejudged = stored_rows(out)["honest"]
    assert "recovered_result" not in rejudged and rejudged["verdict"] == EXPECTED["honest"][0]
    assert log.read_text() != judged_at
