"""benchmarks/judge_speed.py: its summary arithmetic, and one cheap run end to end on the CPU.

The end-to-end run times one record whose candidate fails to load (the cheapest record that
still goes through the KernelBench check, the audit's judge and a real audit), beside an
unreadable record of another level (costs nothing, but makes the run cover more than the
headline's level, so the whole-file summary is written).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelgate.errors import KernelgateError

from .audit_corpus import CANDIDATES, REFERENCE
from .conftest import ROOT, load_benchmark

SCRIPT = ROOT / "benchmarks" / "judge_speed.py"


judge_speed = load_benchmark("judge_speed")


def _script(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
        check=False,
    )


def _row(record_id: str, check: float | None, verdict: float | None, level: int = 1) -> dict:
    ratio = verdict / check if check and verdict is not None else None
    return {
        "id": record_id,
        "level": level,
        "check_s": check,
        "verdict_s": verdict,
        "ratio": ratio,
        "verdict": "verified",
        "check_status": "accepted",
    }


def test_summary_of_known_numbers() -> None:
    rows = [
        _row("a", 1.0, 2.0),  # ratio 2
        _row("b", 2.0, 10.0),  # ratio 5
        _row("c", 4.0, 4.0),  # ratio 1
        _row("d", 10.0, 30.0),  # ratio 3
        _row("e", None, 6.0),  # the check could not run: no ratio, but a verdict time
    ]
    summary = judge_speed.summarize(rows)
    assert summary["records"] == 5
    assert summary["timed_records"] == 4
    assert summary["kernelbench_check_median_s"] == 3.0  # of 1, 2, 4, 10
    assert summary["verdict_median_s"] == 6.0  # of 2, 4, 6, 10, 30
    assert summary["ratio_median"] == 2.5  # of 1, 2, 3, 5: the median of ratios
    # p95 of verdicts 2, 4, 6, 10, 30: position 0.95 * 4 = 3.8, between 10 and 30
    assert summary["verdict_p95_s"] == pytest.approx(26.0)
    assert summary["sequential_verdict_records_per_hour"] == pytest.approx(3600 * 5 / 52, 0.01)
    # only records with both times: (1+2) + (2+10) + (4+4) + (10+30) = 63 s for 4 records
    assert summary["sequential_check_and_verdict_records_per_hour"] == pytest.approx(
        3600 * 4 / 63, 0.01
    )
    assert judge_speed.summarize([])["ratio_median"] is None


def test_percentile_edges() -> None:
    assert judge_speed.percentile([], 0.95) is None
    assert judge_speed.percentile([7.0], 0.95) == 7.0
    assert judge_speed.percentile([3.0, 1.0, 2.0], 0.5) == 2.0


def test_a_cpu_trial_never_defaults_to_the_device_results() -> None:
    assert judge_speed.DEVICE_RESULTS.parent == ROOT / "benchmarks" / "results"
    assert ROOT not in judge_speed.CPU_RESULTS.parents


def test_resume_refuses_a_file_of_other_settings(tmp_path: Path) -> None:
    earlier = tmp_path / "speed.json"
    settings = {"corpus": "h100.jsonl", "device": "cuda", "level": 1}
    earlier.write_text(json.dumps({"schema": judge_speed.SCHEMA, "settings": settings}))
    with pytest.raises(KernelgateError, match="other settings"):
        judge_speed.earlier_rows(earlier, settings | {"level": 2})
    rows, audit = judge_speed.earlier_rows(earlier, settings)
    assert rows == [] and audit is None
    # an audit is kept (not run again) when it finished or stopped at its limit with rows
    assert judge_speed.audit_usable({"complete": True, "rows_stored": 3})
    assert judge_speed.audit_usable({"stopped_at_time_limit": True, "rows_stored": 3})
    assert not judge_speed.audit_usable({"complete": False, "rows_stored": 0, "exit_code": 1})


def test_bad_input_path_is_a_clear_error_without_traceback(tmp_path: Path) -> None:
    done = _script(str(tmp_path / "missing.jsonl"), "--json", str(tmp_path / "out.json"))
    assert done.returncode == 2
    assert "not found" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert not (tmp_path / "out.json").exists()


@pytest.mark.slow
def test_end_to_end_on_the_cpu(tmp_path: Path) -> None:
    corpus = tmp_path / "tiny.jsonl"
    lines = [
        {
            "level_id": 1,
            "task_id": 3,
            "ref_code": REFERENCE,
            "custom_code": CANDIDATES["syntax_error"],
        },
        {"level_id": 2, "task_id": 4, "ref_code": REFERENCE, "custom_code": ""},  # unreadable
    ]
    corpus.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "speed.json"
    # two records at once: a spent time budget still starts only one (as a device call would)
    selection = [str(corpus), "--level", "1", "--whole-file", "--json", str(out), "--jobs", "2"]
    # a spent time budget stops after one record (as a device call would), no audit yet
    done = _script(*selection, "--time-budget", "0")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "1 record(s) left" in done.stderr
    first = json.loads(out.read_text())
    assert first["complete"] is False and first["audit"] is None
    assert [row["id"] for row in first["records"]] == ["tiny/L1/T3"]
    # --resume times only the record left, then audits both
    done = _script(*selection, "--resume", "--audit-workers", "1")
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(out.read_text())
    assert document["records"][0] == first["records"][0]  # kept, not timed again
    assert document["complete"] is True
    assert document["headline_over"] == "level 1"
    timed, unreadable = document["records"]
    assert timed["id"] == "tiny/L1/T3" and timed["level"] == 1
    assert timed["check_status"] == "rejected" and timed["verdict"] == "rejected"
    assert timed["check_s"] > 0 and timed["verdict_s"] > 0
    assert timed["ratio"] == pytest.approx(timed["verdict_s"] / timed["check_s"], rel=1e-3)
    assert timed["check_rerun_in_judge"] is False  # the judge reused the timed check
    if timed["stage"] == "gates":  # gate by gate, where the verdict's time went
        assert timed["gate_seconds"] and all(s >= 0 for s in timed["gate_seconds"].values())
    else:  # rejected before any gate ran (this candidate does not load): no gate times
        assert timed["gate_seconds"] == {}
    assert timed["errors"] == []
    assert unreadable["verdict"] == "unreadable" and unreadable["ratio"] is None
    assert unreadable["errors"] and "empty candidate" in unreadable["errors"][0]
    # the headline is over level 1 (one record); the whole file over both
    assert document["kernelbench_check_median_s"] == timed["check_s"]
    assert document["verdict_median_s"] == timed["verdict_s"]
    assert document["verdict_p95_s"] == timed["verdict_s"]
    assert document["ratio_median"] == timed["ratio"]
    assert document["whole_file"]["records"] == 2
    assert set(document["by_level"]) == {"1", "2"}
    audit = document["audit"]
    assert audit["complete"] is True and audit["records"] == 1 and audit["rows_stored"] == 1
    assert audit["verdicts_differing_from_timed_run"] == []
    assert document["audit_records_per_hour"] == pytest.approx(3600 / audit["wall_s"], rel=0.01)
    for field in ("device", "python", "torch", "triton", "code_commit", "date", "command"):
        assert document[field], field
    assert document["device"] == "cpu" and document["gpu"] is None
    assert document["settings"]["level"] == 1 and document["settings"]["device"] == "cpu"
    assert document["settings"]["jobs"] == 2


def test_selection_by_level_ids_sample_and_limit() -> None:
    from kernelgate.formats.corpus import CorpusRecord

    records = [
        CorpusRecord(f"c/L{level}/T{task}", "cuda-l1", {"level": level, "task": task})
        for level in (1, 2)
        for task in range(1, 6)
    ]

    def ids(**how: object) -> list[str]:
        chosen = judge_speed.select(
            records,
            level=how.get("level"),
            whole_file=bool(how.get("whole_file")),
            ids=list(how.get("ids", [])),
            limit=how.get("limit"),
            sample=how.get("sample"),
        )
        return [record.id for record in chosen]

    assert ids(level=2) == [f"c/L2/T{task}" for task in range(1, 6)]
    assert len(ids(level=2, whole_file=True)) == 10  # headline over level 2, all timed
    assert ids(level=1, limit=2) == ["c/L1/T1", "c/L1/T2"]
    assert ids(ids=["c/L2/T3", "c/L1/T4"]) == ["c/L1/T4", "c/L2/T3"]  # corpus order
    assert ids(sample=4) == ["c/L1/T1", "c/L1/T3", "c/L2/T1", "c/L2/T3"]
    with pytest.raises(KernelgateError, match="not in the corpus"):
        ids(ids=["c/L9/T9"])


def _audit_folder(tmp_path: Path) -> Path:
    """A store as an audit of three records leaves it: a level-1 record timed, a level-1
    record whose check a resumed judge took from an earlier attempt, a level-2 record."""
    from kernelgate.audit.store import ResultStore

    folder = tmp_path / "audit"
    folder.mkdir()
    store = ResultStore.open(folder, resume=False, settings={"device": "cpu", "seed": 0})
    store.set_corpus(["c/L1/T1", "c/L1/T2", "c/L2/T1"])
    store.begin_run({"workers": 4})

    def row(
        record: str, level: int, check: float | None, seconds: float, sanitizer: float = 0.0
    ) -> dict:
        return {
            "id": record,
            "source_ids": {"level": level, "task": 1},
            "verdict": "rejected",
            "stage": "gates",
            "failed_gates": ["CMP-01"],
            "old_check": "accepted",
            "old_check_seconds": check,
            "judge_started_s": 1.0,
            "seconds": seconds,
            "gates": [{"id": "CMP-01", "status": "fail", "seconds": 2.0}],
            "sanitizer": {"tools": {}, "seconds": sanitizer} if sanitizer else {"not_run": "-"},
        }

    # verdict 1 + 13 - 4 = 10 s: ratio 2.5; without its 6 s of sanitizers, 4 s: ratio 1
    store.put(0, row("c/L1/T1", 1, 4.0, 13.0, sanitizer=6.0))
    store.put(1, row("c/L1/T2", 1, None, 9.0))  # check resumed: no ratio
    store.put(2, row("c/L2/T1", 2, 2.0, 21.0))  # verdict 20 s: ratio 10
    store.close()
    return folder


def test_from_audit_reads_check_and_verdict_times_of_one_audit(tmp_path: Path) -> None:
    from rich.console import Console

    out = tmp_path / "speed.json"
    corpus = tmp_path / "c.jsonl"  # not the audit's source: no digest to check against
    document = judge_speed.from_audit_run(
        corpus, _audit_folder(tmp_path), level=1, json_out=out, errors=Console(quiet=True)
    )
    assert json.loads(out.read_text())["ratio_median"] == document["ratio_median"] == 2.5
    rows = {r["id"]: r for r in document["records"]}
    assert rows["c/L1/T1"]["check_s"] == 4.0 and rows["c/L1/T1"]["verdict_s"] == 10.0
    assert rows["c/L1/T2"]["ratio"] is None  # a resumed judge's check was not timed
    assert rows["c/L1/T1"]["sanitizer_s"] == 6.0
    assert (
        document["ratio_median_without_sanitizers"]
        == rows["c/L1/T1"]["ratio_without_sanitizers"]
        == 1.0
    )
    assert document["summary"]["sanitized_records"] == 1
    assert document["summary"]["sanitizer_median_s"] == 6.0
    # the unsanitized level-2 record: the same ratio either way (20 / 2)
    assert rows["c/L2/T1"]["ratio_without_sanitizers"] == rows["c/L2/T1"]["ratio"] == 10.0
    assert document["whole_file"]["ratio_median"] == 6.25  # median of 2.5 and 10
    assert document["audit"]["complete"] and document["audit"]["workers"] == [4]
    assert document["audit"]["records"] == document["audit"]["rows_stored"] == 3
    assert document["audit"]["audit_records_per_hour"] is not None
    assert "old_check_seconds" in document["meanings"]["check_s"]


def test_waits_for_device_memory_count_in_neither_the_check_nor_the_verdict() -> None:
    """A judge's waits for admission, before its check and before its gates, are the
    audit's scheduling: 1 + 20 - 4 - (3 + 4) = 10 s of verdict against a 4 s check."""
    stored = {
        "id": "c/L1/T3",
        "source_ids": {"level": 1, "task": 3},
        "verdict": "rejected",
        "old_check": "accepted",
        "old_check_seconds": 4.0,
        "judge_started_s": 1.0,
        "seconds": 20.0,
        "admission": {"old_check_waited_s": 3.0, "waited_s": 4.0},
    }
    row = judge_speed.audit_row(stored)
    assert row["admission_wait_s"] == 7.0
    assert (row["check_s"], row["verdict_s"], row["ratio"]) == (4.0, 10.0, 2.5)
    # a row from before the two phases: one wait, before the check
    stored["admission"] = {"waited_s": 2.5}
    assert judge_speed.audit_row(stored)["verdict_s"] == 14.5
    del stored["admission"]  # CPU mode: nothing to wait for
    assert judge_speed.audit_row(stored)["verdict_s"] == 17.0


def test_from_audit_errors_are_clear(tmp_path: Path) -> None:
    from rich.console import Console

    quiet = Console(quiet=True)
    with pytest.raises(KernelgateError, match="holds no audit store"):
        judge_speed.from_audit_run(
            tmp_path / "c.jsonl", tmp_path, level=None, json_out=None, errors=quiet
        )
    with pytest.raises(KernelgateError, match="of level 3"):
        judge_speed.from_audit_run(
            tmp_path / "c.jsonl",
            _audit_folder(tmp_path),
            level=3,
            json_out=tmp_path / "x.json",
            errors=quiet,
        )
