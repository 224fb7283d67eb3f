"""benchmarks/audit_time_split.py: an audit's judge logs summed by phase, gate and step."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from .conftest import load_benchmark

split = load_benchmark("audit_time_split")

LOG = """\
18:28:58.796 judge up 6.36 s after its launch (zygote)
18:29:00.580 old check ...
18:29:38.298 old check accepted
18:29:54.284 CMP-01 started
18:29:54.320 CMP-01 candidate [distribution=normal] ...
18:29:54.415 CMP-01 candidate [distribution=normal] 0.1 s
18:29:54.415 CMP-01 expected [distribution=normal] ...
18:29:56.133 CMP-01 expected [distribution=normal] 1.7 s
18:29:56.133 CMP-01 honest:native-eager [distribution=normal] ...
18:29:57.095 CMP-01 honest:native-eager [distribution=normal] 1.0 s
18:30:28.461 CMP-01 pass (34.2 s)
18:30:28.461 EXC-02 started
18:30:29.000 EXC-02 expected [subnormal-mix] 2.0 s
18:31:00.000 EXC-02 fail (31.5 s)
"""


def test_a_log_splits_into_check_load_and_each_gates_logged_and_unlogged_time(
    tmp_path: Path,
) -> None:
    record = tmp_path / "records" / "h100_L1_T9-0"
    record.mkdir(parents=True)
    (record / "judge.log").write_text(LOG)
    result = split.split_audit(tmp_path)
    assert result["records_with_log"] == 1
    assert result["phases_s"]["old check"] == pytest.approx(37.7, abs=0.05)
    assert result["phases_s"]["check end to first gate"] == pytest.approx(16.0, abs=0.05)
    assert result["phases_s"]["gates"] == pytest.approx(65.7)
    cmp01 = result["gates"]["CMP-01"]
    assert cmp01["logged_steps_s"] == pytest.approx(2.8)
    assert cmp01["unlogged_s"] == pytest.approx(31.4)
    assert list(result["gates"]) == ["CMP-01", "EXC-02"]  # most unlogged first
    steps = {(s["gate"], s["step"]): s["count"] for s in result["steps"]}
    assert steps[("CMP-01", "honest")] == 1 and steps[("EXC-02", "expected")] == 1


def test_the_waits_for_device_memory_are_a_phase_of_their_own(tmp_path: Path) -> None:
    """Two-phase admission: the wait before the check precedes it, the wait for the gates'
    reservation lies between the check's end and the first gate and is taken out there."""
    log = LOG.replace(
        "18:29:00.580 old check ...",
        "18:29:00.000 admitted for the old check: 4.1 GiB reserved after 2.5 s\n"
        "18:29:00.580 old check ...",
    ).replace(
        "18:29:54.284 CMP-01 started",
        "18:29:50.000 admitted for the gates: 36.0 GiB reserved after 10.0 s\n"
        "18:29:54.284 CMP-01 started",
    )
    record = tmp_path / "records" / "h100_L1_T9-0"
    record.mkdir(parents=True)
    (record / "judge.log").write_text(log)
    phases = split.split_audit(tmp_path)["phases_s"]
    assert phases["admission wait"] == pytest.approx(12.5)
    assert phases["old check"] == pytest.approx(37.7, abs=0.05)
    assert phases["check end to first gate"] == pytest.approx(6.0, abs=0.05)


def test_a_folder_without_judge_logs_says_what_to_name(tmp_path: Path) -> None:
    with pytest.raises(typer.BadParameter, match=re.escape("records/*/judge.log")):
        split.split_audit(tmp_path)
