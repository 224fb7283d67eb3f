"""The audit's judge spawns the verification's worker before admission and the old check,
so that the worker's start-up overlaps them (issue 19); verify then takes that worker."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelgate.audit import judge
from kernelgate.formats.corpus import CorpusRecord
from kernelgate.pipeline import spawned_worker, verify
from tests.audit_corpus import CANDIDATES, REFERENCE


def test_the_judge_spawns_the_worker_before_the_old_check_and_verify_takes_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    record = CorpusRecord(
        id="early",
        format="pairs",
        reference_source=REFERENCE,
        candidate_source=CANDIDATES["honest"],
    )
    options = judge.AuditOptions(out_dir=str(tmp_path), timeout=60.0, only=("EXC-01",))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (tmp_path / "work").mkdir()
    row = judge.judge_record(record, options, tmp_path / "work", scratch)
    log = capsys.readouterr().err
    assert log.index("worker spawned") < log.index("old check ...") < log.index("EXC-01 started")
    assert row["verdict"] == "verified" and row["old_check"] == "accepted"
    assert "leftover_processes" not in row  # the spawned worker was closed, not killed
    timed = {g["id"]: g["seconds"] for g in row["gates"] if g["status"] != "skipped"}
    assert set(timed) >= {"EXC-01"} and all(s >= 0 for s in timed.values())
    assert timed["EXC-01"] > 0  # each gate's time is kept in the row (where time goes)


def test_verify_refuses_a_worker_spawned_for_another_candidate(tmp_path: Path) -> None:
    reference, candidate, other = (tmp_path / n for n in ("ref.py", "cand.py", "other.py"))
    reference.write_text(REFERENCE)
    candidate.write_text(CANDIDATES["honest"])
    other.write_text(CANDIDATES["honest"])
    session = spawned_worker(other, device="cpu", timeout=60.0)
    try:
        with pytest.raises(ValueError, match="another candidate"):
            verify(reference, candidate, session=session)
    finally:
        session.__exit__(None, None, None)
    assert not session.alive


def test_the_audit_report_says_where_judging_time_went() -> None:
    """Per gate, the median and total seconds over the records that ran it (skipped gates
    and rows from before gate times were kept count for nothing)."""
    from kernelgate.audit.report import summarize

    def row(name: str, exc01: float | None, skipped: bool = False) -> dict:
        gate = {"id": "EXC-01", "kind": "tolerance-free", "reason": ""}
        gate |= {"status": "skipped" if skipped else "pass"}
        if exc01 is not None:
            gate["seconds"] = exc01
        record = CorpusRecord(id=name, format="pairs", reference_source="", candidate_source="")
        return judge.base_row(record) | {
            "verdict": "verified",
            "stage": "gates",
            "old_check": "accepted",
            "old_check_current": "accepted",
            "old_check_detail": {"status": "accepted"},
            "seconds": 10.0,
            "verify_seconds": 8.0,
            "gates": [gate],
        }

    rows = [row("a", 1.0), row("b", 3.0), row("c", None), row("d", 50.0, skipped=True)]
    stats = summarize(rows, {})["gates"]["EXC-01"]
    assert stats["median_s"] == 2.0 and stats["total_s"] == 4.0
