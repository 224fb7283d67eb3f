"""The audit report keeps narrowed records apart (issue 24, part 4): the disagreement
matrix has a column per contract outcome, and the headline rates count a narrowed record
where its gate failed. Built from synthetic store rows: no audit is run."""

from __future__ import annotations

from typing import Any

from kernelgate.audit.report import MATRIX_COLUMNS, _sections, summarize


def _gate(gate_id: str, kind: str, status: str) -> dict[str, Any]:
    return {"id": gate_id, "kind": kind, "status": status, "seconds": 0.5}


def _row(record: str, verdict: str, old: str, failed: list[tuple[str, str]]) -> dict[str, Any]:
    gates = [_gate("CMP-01", "thresholded", "pass"), _gate("MEM-01", "tolerance-free", "pass")]
    gates += [_gate(g, kind, "fail") for g, kind in failed]
    stage = "gates" if verdict in MATRIX_COLUMNS else "load"
    return {
        "id": record,
        "source_ids": [record],
        "source_verdict": "accepted",
        "old_check": old,
        "old_check_current": old,
        "old_check_detail": {},
        "verdict": verdict,
        "stage": stage,
        "gates": gates if stage == "gates" else [],
        "failed_gates": [g for g, _ in failed],
        "seconds": 2.0,
    }


ROWS = [
    _row("clean", "verified", "accepted", []),
    _row("narrow_layout", "narrowed", "accepted", [("CMP-02", "thresholded")]),
    _row("narrow_exact", "narrowed", "rejected", [("EXC-01", "tolerance-free")]),
    _row("nan", "rejected", "accepted", [("EXC-01", "tolerance-free")]),
    _row("wrong", "rejected", "rejected", [("CMP-03", "thresholded")]),
    _row("broken", "error", "accepted", []),
]


def test_disagreement_matrix_has_a_column_per_contract_outcome() -> None:
    summary = summarize(ROWS, {})
    assert summary["disagreement"] == {
        "old_accepts_contract_verified": 1,
        "old_accepts_contract_narrowed": 1,
        "old_accepts_contract_rejected": 1,
        "old_rejects_contract_verified": 0,
        "old_rejects_contract_narrowed": 1,
        "old_rejects_contract_rejected": 1,
        "excluded": 1,
    }
    _title, header, cells = next(t for t in _sections(summary) if t[0].startswith("Disagreement"))
    assert header == ["", "contract verified", "contract narrowed", "contract rejected"]
    assert cells[0] == ["old check accepts", "1 (1)", "1 (1)", "1 (1)"]


def test_headline_rates_count_narrowed_records_where_their_gate_failed() -> None:
    head = summarize(ROWS, {})["headline"]
    assert head["loaded"] == 5
    assert (head["any_gate_fails"], head["any_gate_fails_narrowed"]) == (4, 2)
    assert head["any_gate_fails_rate"] == 0.8
    # the exact gate's failures: one rejected record, one narrowed record
    assert head["any_tolerance_free_gate_fails"] == 2
    assert head["any_tolerance_free_gate_fails_narrowed"] == 1
    assert head["any_tolerance_free_gate_fails_rate"] == 0.4
    *_, cells = next(t for t in _sections(summarize(ROWS, {})) if "Headline" in t[0])
    assert cells == [["5", "4 (80.0%; 2 narrowed)", "2 (40.0%; 1 narrowed)"]]
