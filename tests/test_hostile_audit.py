"""Hostile records mixed among honest ones in a real audit (``redteam/hostile/mixed.py``,
``kernelgate calibrate --hostile --audit``): issue 18's acceptance item.

Fast tests check the corpus builder and the row checks (no judge); one test runs a real
audit of two honest records and three hostile ones aimed at the audit's own folder (about
two minutes of CPU on two cores), skipped only where the machine cannot confine a worker.
"""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kernelgate.audit.judge import work_folder_name
from kernelgate.cli import app
from kernelgate.formats.corpus import read_corpus
from kernelgate.redteam.hostile import kit, mixed
from kernelgate.redteam.hostile.catalog import ATTACKS

NEEDED_CONFINEMENT = ("pid-namespace", "no-network", "readonly-root")


def _rendered_arena(source: str) -> kit.Arena:
    tree = ast.parse(source)
    call = next(
        node.value
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "ARENA"
    )
    return kit.Arena.rendered(ast.literal_eval(call.args[0]))


def test_every_attack_is_either_in_the_audit_or_left_out_with_a_reason() -> None:
    names = {a.name for a in ATTACKS}
    assert set(mixed.IN_AUDIT) | set(mixed.LEFT_OUT) == names
    assert not set(mixed.IN_AUDIT) & set(mixed.LEFT_OUT)
    assert all(len(why) > 40 for why in mixed.LEFT_OUT.values())
    needed = {
        "kill_parent_at_import",
        "detached_evidence_rewriter",
        "write_audit_store",
        "append_to_reference",
        "fork_bomb",
        "ignore_sigterm_and_hang",
        "network_connection",
        "poison_next_judge",
    }
    assert needed <= set(mixed.IN_AUDIT)
    with pytest.raises(ValueError, match="fill_disk"):
        mixed.audit_attacks(["fill_disk"])
    with pytest.raises(KeyError, match="no_such_attack"):
        mixed.audit_attacks(["no_such_attack"])


def test_the_corpus_interleaves_honest_records_and_aims_at_this_audit() -> None:
    """The ids the audit will give name each attack; honest records come first, last and
    between; each hostile candidate is rendered with the audit's pid and its real paths."""
    selected = mixed.audit_attacks(list(mixed.QUICK))
    corpus = mixed.build_corpus(selected, honest=2)
    try:
        corpus.render(4242, (1111, 2222))
        records = read_corpus(corpus.corpus)
        assert [r.id for r in records] == [r.record_id for r in corpus.records]
        kinds = [r.attack.name if r.attack else "honest" for r in corpus.records]
        assert kinds == ["honest", *mixed.QUICK, "honest"]
        for record, read in zip(corpus.records, records, strict=True):
            assert read.unreadable is None and read.format == "cuda-l1"
            assert record.folder == work_folder_name(read.id)
            if record.attack is None:
                assert "ModelNew" in (read.candidate_source or "")
                continue
            assert record.attack.name in read.id
            assert kit.PLACEHOLDER not in (read.candidate_source or "")
            arena = _rendered_arena(read.candidate_source or "")
            out = corpus.out
            assert arena.judge_pid == 4242 and (arena.tcp_port, arena.udp_port) == (1111, 2222)
            assert arena.store_rows == str(out / "audit.sqlite")
            assert arena.reference == str(out / "records" / record.folder / "reference.py")
            first, last = corpus.honest[0].folder, corpus.honest[-1].folder
            assert arena.other_record == str(out / "records" / first / "verdict.json")
            assert arena.evidence == str(out / "records" / last / "verdict.json")
            assert arena.token == record.token and arena.home == str(corpus.home)
            assert Path(arena.source_canary).is_relative_to(corpus.root)
        assert not corpus.out.exists(), "the audit makes its own folder"
    finally:
        shutil.rmtree(corpus.root)


def _row(record: mixed.MixedRecord, verdict: str, **extra: Any) -> dict[str, Any]:
    return {"id": record.record_id, "verdict": verdict, "stage": "gates", **extra}


def test_the_row_checks_fail_for_every_way_an_audit_can_be_forged() -> None:
    corpus = mixed.build_corpus(mixed.audit_attacks(["write_audit_store"]), honest=2)
    try:
        first, hostile, last = corpus.records
        evidence = {first.record_id: b"{}", last.record_id: b"{}", hostile.record_id: None}
        good_digest = "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        honest = {"old_check": "accepted", "evidence_sha256": good_digest}
        rows = {
            first.record_id: [_row(first, "verified", **honest)],
            last.record_id: [_row(last, "verified", **honest)],
            hostile.record_id: [_row(hostile, "rejected")],
        }
        results, extra = mixed.check_records(corpus, rows, evidence)
        assert all(r.ok for r in results) and extra == [], [r.findings for r in results]
        forged = {
            **rows,
            hostile.record_id: [_row(hostile, "verified")],  # a flip
            last.record_id: [_row(last, "verified", old_check="accepted", evidence_sha256="0")],
            "forged-by-candidate": [{"id": "forged-by-candidate", "verdict": "verified"}],
        }
        del forged[first.record_id]
        results, extra = mixed.check_records(corpus, forged, evidence)
        findings = {r.record_id: [f.split(":")[0] for f in r.findings] for r in results}
        assert findings == {
            first.record_id: ["row-missing"],
            hostile.record_id: ["verdict-flip"],
            last.record_id: ["evidence-rewritten"],
        }
        assert extra and "forged-by-candidate" in extra[0]
    finally:
        shutil.rmtree(corpus.root)


def test_calibrate_audit_needs_hostile_and_refuses_left_out_attacks() -> None:
    alone = CliRunner().invoke(app, ["calibrate", "--audit"])
    assert alone.exit_code == 2 and "--hostile" in alone.output
    left_out = CliRunner().invoke(
        app, ["calibrate", "--hostile", "--audit", "--only", "exhaust_memory"]
    )
    assert left_out.exit_code == 2 and "left out of the mixed audit" in left_out.output


@pytest.fixture(scope="module")
def quick_mixed_audit() -> mixed.MixedAudit:
    """Two honest records around three attacks on the audit's own folder."""
    return mixed.run_mixed_audit("cpu", list(mixed.QUICK), honest=2, delay=3.0)


def test_hostile_records_leave_every_honest_row_intact(
    quick_mixed_audit: mixed.MixedAudit,
) -> None:
    """Issue 18's acceptance: the audit finishes, its report stands (no evidence changed),
    every honest row is what the honest record gets alone, every hostile record is rejected
    or an error row named after its attack, nothing of an attack outlives the audit, and
    nothing outside it changed."""
    audit = quick_mixed_audit
    in_force = audit.isolation.split(";")[0].split(", ") if audit.isolation else []
    lacking = [m for m in NEEDED_CONFINEMENT if m not in in_force]
    if audit.isolation and lacking:
        pytest.skip(f"this machine cannot confine the worker ({', '.join(lacking)} missing)")
    report = json.dumps(audit.to_dict(), indent=1)
    assert audit.audit_exit == 0 and audit.report_exit == 0, report
    assert audit.findings == [], report
    honest = [r for r in audit.records if r.attack is None]
    hostile = [r for r in audit.records if r.attack is not None]
    assert len(honest) == 2 and [r.attack for r in hostile] == list(mixed.QUICK)
    for record in honest:
        assert (record.verdict, record.old_check) == ("verified", "accepted"), report
    for record in hostile:
        assert record.verdict in ("rejected", "error"), report
        assert record.attack and record.attack in record.record_id
        assert record.stopped_by and record.stopped_by != "not stopped"
    assert all(r.ok for r in audit.records), report
    for record in audit.records:  # the old check's child ran confined too, and says so
        assert "pid-namespace" in record.old_check_isolation.split(";")[0], report
    assert audit.ok


def test_report_lines_cut_short_in_a_rows_json_are_not_read_as_reports() -> None:
    token = "abc123"
    whole = f"KGH-REPORT|{token}|store-append|0|OSError: [Errno 30] Read-only file system|"
    cut = f"KGH-REPORT|{token}|record-forge|1|created /out/records/forg"
    row = json.dumps({"reason": cut, "gates": [{"replay": "kernelgate verify a|b"}]})
    assert mixed._reports([whole, row], token) == [
        ("store-append", False, "OSError: [Errno 30] Read-only file system")
    ]
    assert mixed._reports([whole], "other") == []
