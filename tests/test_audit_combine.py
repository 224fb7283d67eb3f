"""``kernelgate audit-combine`` (issue 19): one report over several audits.

The audits are synthetic: store rows made here, summarized by ``report.summarize`` as an
audit would, and written as each folder's summary.json. So the combined figures can be
checked against ``summarize`` itself run over every audit's store rows at once: the
combined matrix and headline must be exactly what one audit of all the records would give.
No audit is run, nothing is judged.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kernelgate.audit.combine import (
    COMBINED_SCHEMA,
    MATRIX_CELLS,
    CombineError,
    combine,
    markdown,
    write_combined,
)
from kernelgate.audit.report import summarize
from kernelgate.cli import app

REPO = Path(__file__).resolve().parents[1]
ENV = {"torch": "2.9.0", "triton": "3.5.0", "cuda": "12.8", "device": "cuda", "gpu": "H100"}
KINDS = {
    "CMP-01": "thresholded",
    "CMP-02": "thresholded",
    "CMP-03": "thresholded",
    "EXC-01": "tolerance-free",
    "MEM-01": "tolerance-free",
}


def _row(
    record: str,
    verdict: str,
    old: str,
    failed: tuple[str, ...] = (),
    *,
    current: str | None = None,
    pair: str | None = None,
    reused_from: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A store row as the judge writes it (the fields ``summarize`` reads)."""
    stage = {"unreadable": None, "error": "reference"}.get(verdict, "gates")
    if verdict == "rejected" and not failed:
        stage = "load"
    gates = [
        {"id": g, "kind": k, "status": "fail" if g in failed else "pass", "seconds": 0.5}
        for g, k in KINDS.items()
    ]
    row: dict[str, Any] = {
        "id": record,
        "source_ids": {"file": record.split("/")[0]},
        "source_verdict": "accepted",
        "old_check": old,
        "old_check_current": current or old,
        "old_check_detail": {},
        "verdict": verdict,
        "stage": stage,
        "gates": gates if stage == "gates" else [],
        "failed_gates": list(failed) if stage == "gates" else [],
        "seconds": 3.0,
        "reason": None if verdict != "unreadable" else "no code",
        "judged_with": "abc123",
    }
    if verdict != "unreadable":
        row["environment"] = ENV
        if pair:
            row["inputs_sha256"] = {"reference": f"ref-{pair}", "candidate": f"cand-{pair}"}
    if reused_from:
        row["reused_from"] = reused_from
    return row


H100 = [
    _row("h100/1", "verified", "accepted", pair="p1"),
    _row("h100/2", "narrowed", "accepted", ("CMP-02",), pair="p2"),
    _row("h100/3", "rejected", "accepted", ("EXC-01", "CMP-01"), current="rejected", pair="p3"),
    _row("h100/4", "rejected", "rejected", ("CMP-03",), pair="p4"),
    _row("h100/5", "unreadable", "not-run"),
    _row("h100/6", "error", "accepted", pair="p6"),
]
FROM_H100 = {"audit": "/data/audit-h100", "source": "h100.jsonl"}
A100 = [
    _row("a100/1", "verified", "accepted", pair="p1", reused_from={**FROM_H100, "id": "h100/1"}),
    _row(
        "a100/3",
        "rejected",
        "accepted",
        ("EXC-01", "CMP-01"),
        pair="p3",
        reused_from={**FROM_H100, "id": "h100/3"},
    ),
    _row("a100/7", "narrowed", "rejected", ("EXC-01",), pair="p7"),
    _row("a100/8", "error", "error", pair="p8"),
    _row("a100/9", "rejected", "not-run", pair="p9"),  # did not load
]
L40 = [
    _row("l40/1", "verified", "accepted", current="rejected", pair="p1"),
    _row("l40/10", "rejected", "accepted", ("MEM-01",), pair="p10"),
    _row("l40/11", "rejected", "rejected", ("CMP-01", "CMP-03"), pair="p11"),
]


def _runs(judged: int, hours: float) -> list[dict[str, Any]]:
    return [{"run": 1, "started": 0.0, "last_row": hours * 3600, "judged": judged, "rows": judged}]


def _audit(folder: Path, name: str, rows: list[dict[str, Any]], judged: int) -> Path:
    """An audit folder holding the summary ``kernelgate audit`` would write for ``rows``."""
    settings = {
        "source": f"/data/{name}.jsonl",
        "source_sha256": f"sha-{name}",
        "format": "cuda-l1",
        "device": "cuda",
        "timeout": 60.0,
        "seed": 0,
    }
    summary = summarize(rows, settings, _runs(judged, 0.5), [r["id"] for r in rows])
    out = folder / f"cuda-l1-{name}"
    out.mkdir(parents=True)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return out


@pytest.fixture
def audits(tmp_path: Path) -> list[Path]:
    return [
        _audit(tmp_path, "h100", H100, judged=5),
        _audit(tmp_path, "a100", A100, judged=3),
        _audit(tmp_path, "l40", L40, judged=3),
    ]


def test_the_combined_matrix_is_the_sum_of_the_audits_and_one_audits_rule(
    audits: list[Path],
) -> None:
    combined = combine(audits)
    everything = summarize(H100 + A100 + L40, {})
    assert [p.name for p in combined.audits] == ["cuda-l1-h100", "cuda-l1-a100", "cuda-l1-l40"]
    for matrix in ("disagreement", "disagreement_current_tolerance"):
        whole = getattr(combined, matrix)
        assert whole == everything[matrix]  # the rule of one audit, over all records
        parts = [getattr(p, matrix) for p in combined.audits]
        assert whole == {k: sum(m[k] for m in parts) for k in whole}
    assert combined.disagreement == {
        "old_accepts_contract_verified": 3,
        "old_accepts_contract_narrowed": 1,
        "old_accepts_contract_rejected": 3,
        "old_rejects_contract_verified": 0,
        "old_rejects_contract_narrowed": 1,
        "old_rejects_contract_rejected": 2,
        # unreadable, two errors, a record the old check did not run
        "excluded": 4,
    }
    # at today's tolerance the old check rejects l40/1 (verified) and h100/3 (rejected)
    assert combined.disagreement_current_tolerance["old_rejects_contract_verified"] == 1
    assert combined.disagreement_current_tolerance["old_rejects_contract_rejected"] == 3
    assert combined.records == 14 == sum(p.records for p in combined.audits)
    assert combined.contract == everything["contract"]
    assert combined.old_check == everything["old_check"]


def test_headline_rates_from_summary_rows_equal_those_of_the_store_rows(
    audits: list[Path],
) -> None:
    """Summary rows name only their failed gates; the gate table supplies each one's kind."""
    combined = combine(audits)
    assert combined.headline == summarize(H100 + A100 + L40, {})["headline"]
    assert combined.headline["loaded"] == 10
    assert combined.headline["any_gate_fails"] == 7
    assert combined.headline["any_gate_fails_narrowed"] == 2
    # h100/3, a100/3 (EXC-01), a100/7 (narrowed, EXC-01), l40/10 (MEM-01)
    assert combined.headline["any_tolerance_free_gate_fails"] == 4
    assert combined.headline["any_tolerance_free_gate_fails_narrowed"] == 1
    for part, rows in zip(combined.audits, (H100, A100, L40), strict=True):
        assert part.headline == summarize(rows, {})["headline"]
    assert combined.loaded == 10 and combined.unreadable == 1


def test_reused_rows_count_as_records_of_their_own_audit(audits: list[Path]) -> None:
    combined = combine(audits)
    h100, a100, l40 = combined.audits
    assert (h100.reused, h100.judged) == (0, 5)  # the unreadable record is not judged
    assert (a100.reused, a100.judged) == (2, 3)
    assert a100.records == 5 and a100.contract["verified"] == 1
    assert a100.reused_from == [{"audit": "/data/audit-h100", "source": "h100.jsonl", "rows": 2}]
    assert (combined.reused, combined.judged) == (2, 11)
    assert (l40.reused, l40.judged) == (0, 3)
    # distinct pairs: p1 is in all three audits, p3 in two
    assert combined.distinct_pairs == {
        "distinct": 10,
        "rows_with_digest": 13,
        "rows_without_digest": 0,
        "in_more_than_one_audit": 2,
    }
    assert (h100.distinct_pairs, a100.distinct_pairs) == (5, 5)


def test_gate_failures_and_throughput_are_summed(audits: list[Path]) -> None:
    combined = combine(audits)
    everything = summarize(H100 + A100 + L40, {})["gates"]
    for gate, stats in combined.gates.items():
        assert {k: stats[k] for k in ("kind", "pass", "fail", "skipped", "failure_rate")} == {
            k: everything[gate][k] for k in ("kind", "pass", "fail", "skipped", "failure_rate")
        }
        assert stats["fail"] == sum(p.gate_failures[gate] for p in combined.audits)
    assert combined.gates["EXC-01"]["fail"] == 3
    assert combined.throughput == {
        "audits_timed": 3,
        "judged_in_timed_runs": 11,
        "wall_hours": 1.5,
        "judged_per_hour": 7.3,
    }
    assert [p.judged_per_hour for p in combined.audits] == [10.0, 6.0, 6.0]
    assert combined.audits[0].environments == [{"environment": ENV, "rows": 5}]


def test_the_command_writes_the_page_the_json_and_the_plot(
    audits: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "combined"
    result = CliRunner().invoke(app, ["audit-combine", *map(str, audits), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "3 audit(s), 14 records (11 judged, 2 reused, 1 unreadable)" in result.output
    data = json.loads((out / "summary.json").read_text())
    assert data["schema"] == COMBINED_SCHEMA
    assert data["disagreement"] == combine(audits).disagreement
    assert [a["name"] for a in data["audits"]] == ["cuda-l1-h100", "cuda-l1-a100", "cuda-l1-l40"]
    page = (out / "README.md").read_text()
    for title in (
        "## Audits",
        "## Disagreement matrix (old check at 1e-2; per-dtype tolerance in brackets): "
        "3 audits, 14 records",
        "## Disagreement matrix per audit",
        "## Headline rates",
        "## Gate failures",
        "## Judged with",
    ):
        assert title in page
    assert "| old check accepts | 3 (2) | 1 (1) | 3 (2) |" in page
    assert "| **all** | 10 | 7 (70.0%; 2 narrowed) | 4 (40.0%; 1 narrowed) |" in page
    assert "| cuda-l1-a100 | a100.jsonl | cuda | 5 | 0 | 3 |" in page
    assert "2 reused from an earlier judging" in page
    assert "Distinct (reference, candidate) pairs: 10" in page
    pytest.importorskip("matplotlib")
    assert data["plots"] == ["disagreement.png"]
    assert (out / "disagreement.png").read_bytes().startswith(b"\x89PNG")
    # combining again into the same folder replaces the combined files
    again = CliRunner().invoke(app, ["audit-combine", *map(str, audits), "--out", str(out)])
    assert again.exit_code == 0, again.output


def _broken(folder: Path, how: str) -> Path:
    summary_path = folder / "summary.json"
    summary = json.loads(summary_path.read_text())
    if how == "no summary":
        summary_path.unlink()
    elif how == "not json":
        summary_path.write_text("{ half")
    elif how == "schema":
        summary["schema"] = "kernelgate.audit-summary/0"
    elif how == "no verdict":
        del summary["rows"][2]["verdict"]
    elif how == "odd verdict":
        summary["rows"][0]["verdict"] = "accepted"
    elif how == "records":
        summary["records"] = 99
    elif how == "gate kind":
        del summary["gates"]["EXC-01"]
    if how not in ("no summary", "not json"):
        summary_path.write_text(json.dumps(summary))
    return folder


@pytest.mark.parametrize(
    ("how", "message"),
    [
        ("no summary", "no summary.json"),
        ("not json", "cannot be read as JSON"),
        ("schema", "schema 'kernelgate.audit-summary/0'"),
        ("no verdict", "row 2 (a100/7) has no 'verdict'"),
        ("odd verdict", "verdict 'accepted' is none of"),
        ("records", "'records' is 99 but it holds 5 rows"),
        ("gate kind", "failed EXC-01, which the 'gates' table does not list"),
    ],
)
def test_a_malformed_audit_exits_2_naming_the_folder(
    audits: list[Path], tmp_path: Path, how: str, message: str
) -> None:
    bad = _broken(audits[1], how)
    out = tmp_path / "combined"
    result = CliRunner().invoke(app, ["audit-combine", *map(str, audits), "--out", str(out)])
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and str(bad) in result.output
    assert message in result.output
    assert "Traceback" not in result.output
    assert not out.exists()  # nothing written


def test_refusals_that_would_count_twice_or_overwrite_an_audit(
    audits: list[Path], tmp_path: Path
) -> None:
    h100 = audits[0]
    cases = {
        "is given twice": [str(h100), str(h100), "--out", str(tmp_path / "o1")],
        "is one of the audits": [str(h100), "--out", str(h100)],
        "not a folder": [str(tmp_path / "missing"), "--out", str(tmp_path / "o2")],
        "holds a summary.json that is not a combined one": [
            str(audits[1]),
            "--out",
            str(h100),
        ],
    }
    for message, args in cases.items():
        result = CliRunner().invoke(app, ["audit-combine", *args])
        assert result.exit_code == 2, (message, result.output)
        assert message in result.output, result.output
    copy = tmp_path / "elsewhere" / "copy-of-h100"
    shutil.copytree(h100, copy)
    with pytest.raises(CombineError, match="audits the same corpus"):
        combine([h100, copy])
    assert json.loads((h100 / "summary.json").read_text())["schema"].startswith("kernelgate.audit")


def test_folders_of_one_name_are_told_apart_by_their_corpus(tmp_path: Path) -> None:
    first = _audit(tmp_path / "m1", "h100", H100, judged=5).rename(tmp_path / "m1" / "out")
    second = _audit(tmp_path / "m2", "a100", A100, judged=3).rename(tmp_path / "m2" / "out")
    assert [p.name for p in combine([first, second]).audits] == ["out", "cuda-l1-a100"]


def test_the_committed_h100_audit_combines_with_a_synthetic_one(
    audits: list[Path], tmp_path: Path
) -> None:
    """The committed summary predates the narrowed column and the headline block: its rows
    still carry what the combined figures need, and its figures come out as its README says
    (72 of 207 loaded records fail a tolerance-free gate; 49 accepted by the old check
    break the contract)."""
    committed = REPO / "docs" / "audits" / "cuda-l1-h100"
    combined = write_combined([committed, audits[2]], tmp_path / "out")
    h100 = combined.audits[0]
    assert h100.name == "cuda-l1-h100" and h100.records == 250 and h100.loaded == 207
    assert h100.disagreement["old_accepts_contract_rejected"] == 49
    assert h100.headline["any_tolerance_free_gate_fails"] == 72
    assert h100.distinct_pairs is None and h100.environments is None
    assert combined.distinct_pairs is not None  # the synthetic rows record their pairs
    assert combined.records == 253
    cells = [*MATRIX_CELLS, "excluded"]
    assert all(
        combined.disagreement[c] == h100.disagreement[c] + combined.audits[1].disagreement[c]
        for c in cells
    )
    assert "cuda-l1-h100" in markdown(combined)
