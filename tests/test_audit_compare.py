"""benchmarks/audit_compare.py: two audits' verdicts record by record (issue 19's "verdicts
unchanged against the committed audit, except rows you explain"). Synthetic summaries of a
few rows, a tiny store, a throughput JSON; nothing is judged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT, load_benchmark

SCRIPT = ROOT / "benchmarks" / "audit_compare.py"
H100 = ROOT / "docs" / "audits" / "cuda-l1-h100"


def _module():
    return load_benchmark("audit_compare")


def _row(
    record: str,
    verdict: str,
    gates: tuple[str, ...] = (),
    rules: tuple[str, ...] = (),
    stage: str | None = "gates",
    reason: str | None = None,
) -> dict[str, Any]:
    """A summary row (audit/report.py's ``rows``), with a reason per failed gate."""
    return {
        "id": record,
        "verdict": verdict,
        "stage": stage,
        "failed_gates": list(gates),
        "failed_rules": list(rules),
        "gate_reasons": {g: f"why {g} failed at {record}" for g in gates},
        "reason": reason,
        "seconds": 1.0,
    }


def _summary(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": "kernelgate.audit-summary/1", "rows": rows}))
    return path


def _run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )


BEFORE = [
    _row("c/same", "rejected", ("EXC-01",)),
    _row("c/added", "rejected", ("EXC-01",)),
    _row("c/removed", "rejected", ("EXC-01", "MEM-01")),
    _row("c/swapped", "rejected", ("EXC-01",)),
    _row("c/to_load", "verified"),
    _row("c/freed", "rejected", ("ORD-02",)),
    _row("c/narrowed", "narrowed", ("CMP-03",)),
    _row("c/old_only", "verified"),
    _row("c/overlaid", "verified"),
]
AFTER = [
    _row("c/same", "rejected", ("EXC-01",), ("AUTH-01",)),
    _row("c/added", "rejected", ("EXC-01", "ORD-02")),
    _row("c/removed", "rejected", ("EXC-01",)),
    _row("c/swapped", "rejected", ("ORD-02",)),
    _row("c/to_load", "rejected", stage="load", reason="candidate failed to load: OSError"),
    _row("c/freed", "rejected", rules=("AUTH-01",)),  # AUTH-01 alone: verified once aside
    _row("c/narrowed", "rejected", ("CMP-03",), ("AUTH-01",)),  # narrowed or rejected
    _row("c/overlaid", "rejected", ("ORD-02",)),
    _row("c/new_only", "verified"),
]


def test_each_kind_of_difference_with_overlays_and_a_set_aside_rule(tmp_path: Path) -> None:
    before = _summary(tmp_path / "before.json", BEFORE)
    # the re-judgement saw c/overlaid's ORD-02 before this audit did: it is no difference
    overlay = _summary(tmp_path / "overlay.json", [_row("c/overlaid", "rejected", ("ORD-02",))])
    after = _summary(tmp_path / "after.json", AFTER)
    out_json, out_md = tmp_path / "cmp.json", tmp_path / "cmp.md"
    done = _run(
        before,
        "--overlay",
        overlay,
        after,
        "--set-aside",
        "AUTH-01",
        "--json",
        out_json,
        "--markdown",
        out_md,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(out_json.read_text())
    assert result["schema"] == "kernelgate.audit-compare/1"
    assert result["overlays"][0]["replaced"] == 1
    assert result["counts"] == {
        "both": 8,
        "same": 3,  # c/same, c/narrowed (its AUTH-01 set aside), c/overlaid
        "different": 5,
        "only_before": 1,
        "only_after": 1,
    }
    assert result["only_before"] == ["c/old_only"] and result["only_after"] == ["c/new_only"]
    assert result["by_kind"] == {
        "verdict changed": ["c/freed", "c/to_load"],
        "gates added": ["c/added"],
        "gates removed": ["c/removed"],
        "gates added and removed": ["c/swapped"],
    }
    assert result["verdict_changes"] == {
        "rejected -> verified": 1,
        "verified -> rejected at load": 1,
    }
    assert result["moved_towards_acceptance"] == ["c/freed"]
    first = result["differences"][0]  # the moves towards acceptance come first
    assert first["id"] == "c/freed" and first["gates_removed"] == ["ORD-02"]
    assert first["gate_reasons"] == {"ORD-02": {"before": "why ORD-02 failed at c/freed"}}
    swapped = next(d for d in result["differences"] if d["id"] == "c/swapped")
    assert swapped["gate_reasons"] == {
        "ORD-02": {"after": "why ORD-02 failed at c/swapped"},
        "EXC-01": {"before": "why EXC-01 failed at c/swapped"},
    }
    table = out_md.read_text()
    assert "| record | before | now | why |" in table
    assert "| `freed` | rejected (ORD-02) | verified (AUTH-01 set aside) |" in table
    assert "| `to_load` | verified | rejected at load | candidate failed to load" in table
    assert "Moved towards acceptance (check these first): `freed`." in table
    assert "5 differ" in done.stderr and "moved towards acceptance" in done.stderr


def test_without_the_set_aside_the_rule_counts(tmp_path: Path) -> None:
    module = _module()
    before = {r["id"]: module.Judgement.from_row(r, "before") for r in BEFORE}
    after = {r["id"]: module.Judgement.from_row(r, "after") for r in AFTER}
    result = module.compare(before, after, frozenset())
    assert "c/narrowed" in result["by_kind"]["verdict changed"]  # narrowed -> rejected
    assert "c/same" in result["by_kind"]["gates added"]  # AUTH-01, a rule, counts as a gate
    assert "c/freed" in result["by_kind"]["gates added and removed"]  # rejected either way
    assert result["moved_towards_acceptance"] == []


@pytest.mark.parametrize(
    "row, verdicts",
    [
        (_row("a", "rejected", rules=("AUTH-01",)), {"verified"}),
        (_row("a", "rejected", ("CMP-03", "RES-01"), ("AUTH-01",)), {"narrowed", "rejected"}),
        (_row("a", "rejected", ("ORD-02",), ("AUTH-01",)), {"rejected"}),
        (_row("a", "rejected", ("CMP-03",), ("AUTH-01", "STA-01")), {"rejected"}),
        (_row("a", "rejected", ("RES-01",), ("AUTH-01",)), {"rejected"}),
        (_row("a", "narrowed", ("CMP-03",)), {"narrowed"}),
        (_row("a", "rejected", stage="load"), {"rejected"}),
    ],
)
def test_a_verdict_with_auth01_set_aside(row: dict[str, Any], verdicts: set[str]) -> None:
    judged = _module().Judgement.from_row(row, "x")
    assert judged.verdicts(frozenset({"AUTH-01"})) == verdicts


def test_an_audit_store_and_a_throughput_json_as_inputs(tmp_path: Path) -> None:
    """A folder with audit.sqlite is read from a copy (its bytes stay as they were), its rows
    with their gates' reasons; a throughput JSON (schema /2) through its ``rows``."""
    from kernelgate.audit.store import STORE_NAME, ResultStore

    folder = tmp_path / "audit"
    store = ResultStore.open(folder, resume=False, settings={"source_sha256": "x"})
    gates = [
        {"id": "EXC-01", "kind": "tolerance-free", "status": "fail", "reason": "NaN lost"},
        {"id": "ORD-02", "kind": "tolerance-free", "status": "fail", "reason": "reused"},
        {"id": "CMP-01", "kind": "thresholded", "status": "pass", "reason": ""},
    ]
    row = _row("c/added", "rejected", ("EXC-01", "ORD-02"))
    del row["gate_reasons"]  # a store's row keeps its gates instead
    store.put(0, {**row, "gates": gates})
    # left open, its row still in the WAL, as a store snapshotted mid-run is: the comparison
    # copies the store with its WAL and writes nothing beside the original
    kept = sorted(p.name for p in folder.iterdir()), (folder / STORE_NAME).read_bytes()
    before = _summary(tmp_path / "before.json", BEFORE)
    done = _run(before, folder, "--json", tmp_path / "store.json")
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "store.json").read_text())
    assert result["after"]["kind"] == "store" and result["counts"]["both"] == 1
    assert result["differences"][0]["gate_reasons"] == {"ORD-02": {"after": "reused"}}
    assert (sorted(p.name for p in folder.iterdir()), (folder / STORE_NAME).read_bytes()) == kept
    store.close()

    sliced = tmp_path / "throughput.json"
    rows = [_row("c/to_load", "rejected", stage="load", reason="OSError"), _row("c/x", "verified")]
    sliced.write_text(json.dumps({"schema": "kernelgate.audit-throughput/2", "rows": rows}))
    done = _run(before, sliced, "--json", tmp_path / "slice.json")
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "slice.json").read_text())
    assert result["after"]["kind"] == "throughput"
    assert result["by_kind"]["verdict changed"] == ["c/to_load"]
    assert result["only_after"] == ["c/x"]


@pytest.mark.parametrize(
    "write, message",
    [
        (None, "does not exist"),
        ("{not json", "cannot be read as JSON"),
        ('{"schema": "kernelgate.audit-throughput/1", "rows": 112}', "without its rows"),
        ('{"schema": "something/1", "rows": []}', "neither an audit summary"),
    ],
)
def test_an_unreadable_input_is_a_clean_error(
    tmp_path: Path, write: str | None, message: str
) -> None:
    bad = tmp_path / "after.json"
    if write is not None:
        bad.write_text(write)
    done = _run(_summary(tmp_path / "before.json", BEFORE), bad)
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_the_committed_h100_comparison_of_2026_12_04() -> None:
    """The comparison run-2026-12-04/README.md made by hand: 181 of 204 the same, 23 differ,
    L1/T9 the only move towards acceptance."""
    module = _module()
    _, before = module.load(H100 / "summary.json", "before")
    for part in ("rejudge-issue17", "rejudge-issue17/part2"):
        before |= module.load(H100 / part / "summary.json", part)[1]
    _, after = module.load(H100 / "run-2026-12-04" / "summary.json", "after")
    result = module.compare(before, after, frozenset({"AUTH-01"}))
    assert result["counts"] == {
        "both": 204,
        "same": 181,
        "different": 23,
        "only_before": 46,
        "only_after": 0,
    }
    assert result["moved_towards_acceptance"] == ["h100/L1/T9"]
    assert result["by_kind"]["verdict changed"] == [
        "h100/L1/T9",
        "h100/L2/T37",
        "h100/L2/T87",
        "h100/L3/T34",
    ]
