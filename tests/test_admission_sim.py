"""benchmarks/admission_sim.py: the replay of an audit's rows under one- and two-phase
admission. A tiny store; nothing runs but the replay."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from kernelgate.audit import admission

from .conftest import load_benchmark

GIB = 1 << 30


def _store(path: Path, rows: list[dict]) -> Path:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE rows (id TEXT PRIMARY KEY, position INTEGER, data TEXT)")
        for position, row in enumerate(rows):
            db.execute("INSERT INTO rows VALUES (?, ?, ?)", (row["id"], position, json.dumps(row)))
    return path


def _row(name: str, seconds: float, check: float, elements: int, waited: float = 0.0) -> dict:
    return {
        "id": name,
        "verdict": "rejected",
        "seconds": seconds + waited,
        "judge_started_s": 1.0,
        "old_check_seconds": check - 1.0,
        "admission": {"elements": elements, "work_elements": 0, "waited_s": waited},
    }


def test_the_rows_become_phases_with_todays_estimates(tmp_path: Path) -> None:
    sim = load_benchmark("admission_sim")
    store = _store(
        tmp_path / "audit.sqlite",
        [
            _row("a", 100.0, 40.0, 1 << 28, waited=30.0),
            {"id": "u", "verdict": "unreadable", "seconds": 0.0},
            {"id": "cpu", "verdict": "rejected", "seconds": 5.0},  # no admission sizes
        ],
    )
    two_phase = _row("b", 100.0, 40.0, 1 << 28)
    two_phase["seconds"] += 12.0  # waited 5 s before its check and 7 s before its gates
    two_phase["admission"] |= {"old_check_waited_s": 5.0, "waited_s": 7.0}
    with sqlite3.connect(store) as db:
        db.execute("INSERT INTO rows VALUES (?, ?, ?)", ("b", 3, json.dumps(two_phase)))
    record, both = sim.records_of(store)
    assert both.id == "b" and both.gates.seconds == pytest.approx(60.0), "both waits left out"
    assert record.id == "a"
    assert record.check.seconds == pytest.approx(40.0)
    assert record.gates.seconds == pytest.approx(60.0), "the wait is not judge time"
    assert record.check.reserved == admission.estimate_old_check_bytes(1 << 28, 0)
    assert record.gates.reserved == admission.estimate_device_bytes(1 << 28, 0)


def test_two_phases_let_a_check_run_beside_a_large_record(tmp_path: Path) -> None:
    """Two records that do not fit together at the gates' size: with one reservation the
    second waits for the whole first; with two, its check runs beside the first's gates."""
    sim = load_benchmark("admission_sim")
    big = sim.Record("big", sim.Phase(10.0, 10 * GIB), sim.Phase(50.0, 60 * GIB))
    other = sim.Record("other", sim.Phase(30.0, 5 * GIB), sim.Phase(20.0, 60 * GIB))
    budget = 100 * GIB
    one = sim.replay([big, other], workers=2, budget=budget, policy="one")
    two = sim.replay([big, other], workers=2, budget=budget, policy="two")
    assert one == pytest.approx(60.0 + 50.0)  # other starts when big ends
    # other's check (30 s) runs beside big; its gates wait until big's end at 60 s
    assert two == pytest.approx(60.0 + 20.0)
    alone = sim.replay([big], workers=1, budget=GIB, policy="two")
    assert alone == pytest.approx(60.0), "a phase over the budget runs when alone"


def test_a_gates_phase_keeps_its_records_place_in_line() -> None:
    """A record whose check is done asks for its gates with its first place in line, ahead
    of a record whose check has waited since later in the line."""
    sim = load_benchmark("admission_sim")
    running = sim.Record("running", sim.Phase(1.0, 1 * GIB), sim.Phase(100.0, 50 * GIB))
    early = sim.Record("early", sim.Phase(5.0, 1 * GIB), sim.Phase(10.0, 60 * GIB))
    late = sim.Record("late", sim.Phase(1.0, 99 * GIB), sim.Phase(1.0, 1 * GIB))
    wall = sim.replay([running, early, late], workers=3, budget=100 * GIB, policy="two")
    # late's check (99 GiB) waits from 0; early's gates join the line at 5 but ahead of it
    # (first asked at 0, an earlier record): at 101 early's gates run (to 111), then late's
    # check (to 112) and gates (to 113). Had the gates gone to the back of the line, late's
    # check would have run at 101 and the audit ended at 112.
    assert wall == pytest.approx(113.0)
