"""``kernelgate audit --reuse``: a record whose pair an earlier audit (or this one) judged the
same way takes that row instead of being judged again (``audit/reuse.py``).

One test runs real judges (CPU, ``--only EXC-01``, two CUDA-L1 files sharing two pairs); the
others use a fake executor that counts the records it judges (``counting_executor``), so
that what is or is not reused shows in the count, in a fraction of a second.
"""

from __future__ import annotations

import functools
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kernelgate.audit.store import STORE_NAME
from kernelgate.errors import KernelgateError

from .audit_corpus import CANDIDATES, REFERENCE, write_pairs
from .conftest import audit_command
from .conftest import kernelgate as run_kernelgate

kernelgate = functools.partial(run_kernelgate, timeout=240)
ONLY = "EXC-01"  # a partial audit, as test_audit's: the reuse does not depend on the gates

# The fields a reused row takes from its own record (or its own audit folder), not the
# row it copies: everything else must be the same.
IDENTITY = {"id", "source_ids", "source_verdict", "reference", "candidate", "replay"}
IDENTITY |= {"evidence", "reused_from", "gates", "format"}


def stored_rows(out: Path) -> dict[str, dict[str, Any]]:
    with sqlite3.connect(out / STORE_NAME) as db:
        return {i: json.loads(d) for i, d in db.execute("SELECT id, data FROM rows")}


def cuda_l1(path: Path, pairs: list[tuple[int, str]]) -> Path:
    """A CUDA-L1 file: one line per (task id, candidate name of ``audit_corpus``)."""
    lines = [
        json.dumps(
            {"level_id": 1, "task_id": task, "ref_code": REFERENCE, "custom_code": CANDIDATES[name]}
        )
        for task, name in pairs
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def judged_parts(row: dict[str, Any]) -> dict[str, Any]:
    """A row less what belongs to its record; gate replays less their paths."""
    parts = {k: v for k, v in row.items() if k not in IDENTITY}
    parts["gates"] = [{k: v for k, v in g.items() if k != "replay"} for g in row["gates"]]
    return parts


# -- real judges -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_audits(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """h100.jsonl (honest, NaN swallower) audited; then a100.jsonl (the same two pairs at
    other lines, and a syntax error) audited with ``--reuse`` of the first."""
    root = tmp_path_factory.mktemp("reuse")
    first = cuda_l1(root / "h100.jsonl", [(1, "honest"), (2, "nan_swallow")])
    second = cuda_l1(root / "a100.jsonl", [(7, "syntax_error"), (8, "nan_swallow"), (9, "honest")])
    out_a, out_b = root / "out-h100", root / "out-a100"
    judged = kernelgate(*audit_command(first, out_a, "--only", ONLY, "--workers", "2"))
    assert judged.returncode == 0, judged.stderr
    reused = kernelgate(
        *audit_command(second, out_b, "--only", ONLY, "--workers", "2", "--reuse", str(out_a))
    )
    assert reused.returncode == 0, reused.stderr
    return {"a": out_a, "b": out_b, "result": reused}


def test_reused_rows_copy_the_verdict_and_judge_nothing(two_audits: dict[str, Any]) -> None:
    """The two shared pairs are not judged again (no judge ran in their folders: no
    judge.log), their rows have the first audit's verdict fields, and the new pair is
    judged; the command says at its start how many it reuses from where."""
    out_a, out_b = two_audits["a"], two_audits["b"]
    first, second = stored_rows(out_a), stored_rows(out_b)
    pairs = {"a100/L1/T9": "h100/L1/T1", "a100/L1/T8": "h100/L1/T2"}
    for new_id, old_id in pairs.items():
        row, old = second[new_id], first[old_id]
        assert row["reused_from"] == {
            "audit": str(out_a.resolve()),
            "source": "h100.jsonl",
            "id": old_id,
        }
        assert judged_parts(row) == judged_parts(old)
        folder = Path(row["evidence"]).parent
        assert not (folder / "judge.log").exists()  # no judge ran for it
    assert "reused_from" not in second["a100/L1/T7"]
    assert second["a100/L1/T7"]["verdict"] == "rejected"
    stderr = two_audits["result"].stderr
    assert f"reusing 2 record(s) judged before: 2 from {out_a.resolve()} (h100.jsonl)" in stderr
    assert "1 judged now, 2 reused" in two_audits["result"].stdout


def test_a_reused_row_names_its_own_record_and_folder(two_audits: dict[str, Any]) -> None:
    """Id, source ids, position and every path of a reused row are the new record's: its
    replay and evidence are in this audit's folder, and the evidence is a verified copy."""
    out_a, out_b = two_audits["a"], two_audits["b"]
    row = stored_rows(out_b)["a100/L1/T8"]
    old = stored_rows(out_a)["h100/L1/T2"]
    assert row["id"] == "a100/L1/T8"
    assert row["source_ids"] == {"file": "a100", "line": 2, "level": 1, "task": 8}
    assert row["source_verdict"] == "accepted"
    work = Path(row["evidence"]).parent
    assert work.parent == out_b.resolve() / "records" and work.name.startswith("a100_L1_T8")
    assert (work / "verdict.json").read_bytes() == Path(old["evidence"]).read_bytes()
    assert row["reference"] == str(work / "reference.py") and Path(row["reference"]).exists()
    assert row["candidate"] == str(work / "candidate.py")
    assert (work / "candidate.py").read_text() == CANDIDATES["nan_swallow"]
    for text in [row["replay"], *(g["replay"] for g in row["gates"] if g["replay"])]:
        assert str(work) in text and str(out_a) not in text
    with sqlite3.connect(out_b / STORE_NAME) as db:
        positions = dict(db.execute("SELECT id, position FROM rows").fetchall())
    assert positions == {"a100/L1/T7": 0, "a100/L1/T8": 1, "a100/L1/T9": 2}
    summary = json.loads((out_b / "summary.json").read_text())
    assert summary["evidence_integrity"]["verified"] == 2  # the copies, checked again


def test_the_summary_and_report_count_reused_rows_apart(two_audits: dict[str, Any]) -> None:
    """The summary's ``reused`` block and the throughput count judged and reused rows
    apart (judged per hour from judged rows only); the report lists the reused rows."""
    out_a, out_b = two_audits["a"], two_audits["b"]
    summary = json.loads((out_b / "summary.json").read_text())
    assert summary["reused"] == {
        "rows": 2,
        "judged": 1,
        "from": [{"audit": str(out_a.resolve()), "source": "h100.jsonl", "rows": 2}],
    }
    speed = summary["throughput"]
    assert speed["judged_in_timed_runs"] == 1 and speed["reused_in_timed_runs"] == 2
    (run,) = speed["per_run"]
    assert (run["judged"], run["reused"]) == (1, 2)
    # one judged row in the run's wall time; the three rows with the reused are apart
    assert speed["judged_per_hour"] == pytest.approx(3600 / run["wall_s"], rel=0.05)
    assert speed["rows_per_hour_with_reused"] == pytest.approx(
        3 * speed["judged_per_hour"], rel=0.01
    )
    report = (out_b / "report.md").read_text()
    assert "Reused: 2 row(s) were not judged in this audit" in report
    verdicts = {row["id"]: row["verdict"] for row in summary["rows"]}
    for new_id, old_id in (("a100/L1/T8", "h100/L1/T2"), ("a100/L1/T9", "h100/L1/T1")):
        assert f"| {new_id} | {verdicts[new_id]} | h100.jsonl | {old_id} |" in report
    assert "a100/L1/T7 |" not in report.split("## Reused verdicts")[1]
    first = json.loads((out_a / "summary.json").read_text())
    assert first["reused"]["rows"] == 0 and all(r["reused_from"] is None for r in first["rows"])


# -- a fake executor -------------------------------------------------------------------------


def counting_executor(
    monkeypatch: pytest.MonkeyPatch,
    judge: Callable[[Any], dict[str, Any]] | None = None,
) -> list[str]:
    """The runner's executors made fakes that judge each record as its judge would record
    it (inputs, environment and an evidence file with its digest included), verified unless
    ``judge`` gives fields to add; returns the ids judged, in order."""
    from kernelgate.audit import runner
    from kernelgate.audit.identity import judging_environment
    from kernelgate.audit.judge import base_row, evidence_path
    from kernelgate.audit.reuse import record_inputs
    from kernelgate.evidence_io import write_atomic

    judged: list[str] = []

    class Counting:
        def __init__(self, workers: int) -> None:
            self.workers, self.description = workers, f"counting, {workers}"

        def judge_all(self, records, options):
            for record in records:
                judged.append(record.id)
                evidence = evidence_path(Path(options.out_dir), record.id)
                evidence.parent.mkdir(parents=True, exist_ok=True)
                row = base_row(record) | {
                    "evidence": str(evidence),
                    "evidence_sha256": write_atomic(evidence, json.dumps([record.id]).encode()),
                    "verdict": "verified",
                    "stage": "gates",
                    "inputs_sha256": record_inputs(record),
                    "environment": judging_environment(options.device),
                    "only": options.gates_selected,
                }
                yield record, row | (judge(record) if judge else {})

        def close(self) -> None:
            pass

    monkeypatch.setattr(runner, "make_executor", lambda kind, *, workers, **_: Counting(workers))
    return judged


def audit(corpus: Path, out: Path, **options: Any) -> Any:
    from kernelgate.audit.runner import run_audit

    return run_audit(corpus, out, workers=options.pop("workers", 1), **options)


def test_reuse_needs_the_same_bytes_settings_code_and_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each part of the identity, changed alone, makes the pair judged again: one byte of a
    candidate, a setting that decides rows, the judge's code, the environment."""
    from kernelgate.audit import judge

    judged = counting_executor(monkeypatch)
    first = write_pairs(tmp_path / "first", ["honest", "nan_swallow"])
    audit(first, tmp_path / "out-first")
    assert sorted(judged) == ["honest", "nan_swallow"]

    judged.clear()
    same = write_pairs(tmp_path / "same", ["honest", "nan_swallow"])
    outcome = audit(same, tmp_path / "out-same", reuse=[tmp_path / "out-first"])
    assert judged == [] and outcome.reused_now == 2 and outcome.judged_now == 0

    changed = write_pairs(tmp_path / "changed", ["honest", "nan_swallow"])
    candidate = changed / "honest" / "candidate.py"
    candidate.write_bytes(candidate.read_bytes() + b" ")  # one byte more
    audit(changed, tmp_path / "out-changed", reuse=[tmp_path / "out-first"])
    assert judged == ["honest"]

    judged.clear()
    audit(same, tmp_path / "out-timeout", reuse=[tmp_path / "out-first"], timeout=5.0)
    assert sorted(judged) == ["honest", "nan_swallow"]

    judged.clear()
    monkeypatch.setattr(judge, "_given_code_digest", "0123456789ab")  # other code
    audit(same, tmp_path / "out-code", reuse=[tmp_path / "out-first"])
    assert sorted(judged) == ["honest", "nan_swallow"]
    monkeypatch.setattr(judge, "_given_code_digest", None)

    judged.clear()
    with sqlite3.connect(tmp_path / "out-first" / STORE_NAME) as db:  # judged elsewhere
        db.execute(
            "UPDATE rows SET data = json_set(data, '$.environment.torch', '1.0') "
            "WHERE id = 'honest'"
        )
    audit(same, tmp_path / "out-env", reuse=[tmp_path / "out-first"])
    assert judged == ["honest"]


def test_only_final_rows_are_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A judge's error, a memory failure and a row that does not record its environment
    are no verdict to copy: those pairs are judged again."""
    from kernelgate.audit.judge import ERROR

    failures = {
        "crash": {"verdict": ERROR, "reason": "judge process exited"},
        "hang": {"verdict": "rejected", "device_memory_incident": True},
        "syntax_error": {"environment": None},
    }
    judged = counting_executor(monkeypatch, lambda record: failures.get(record.id, {}))
    names = ["honest", *failures]
    audit(write_pairs(tmp_path / "first", names), tmp_path / "out-first")
    judged.clear()
    audit(
        write_pairs(tmp_path / "second", names),
        tmp_path / "out-second",
        reuse=[tmp_path / "out-first"],
    )
    assert sorted(judged) == sorted(failures)


def test_identity_fields_come_from_the_new_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the old row says of its own record (its id, its corpus's verdict), the new
    row says it of the new one."""
    counting_executor(monkeypatch)
    audit(cuda_l1(tmp_path / "h100.jsonl", [(1, "honest")]), tmp_path / "out-h100")
    with sqlite3.connect(tmp_path / "out-h100" / STORE_NAME) as db:
        db.execute("UPDATE rows SET data = json_set(data, '$.source_verdict', 'rejected')")
    audit(
        cuda_l1(tmp_path / "l40.jsonl", [(5, "nan_swallow"), (1, "honest")]),
        tmp_path / "out-l40",
        reuse=[tmp_path / "out-h100"],
    )
    row = stored_rows(tmp_path / "out-l40")["l40/L1/T1"]
    assert row["reused_from"]["id"] == "h100/L1/T1"
    assert row["id"] == "l40/L1/T1" and row["source_verdict"] == "accepted"
    assert row["source_ids"] == {"file": "l40", "line": 2, "level": 1, "task": 1}
    assert "l40_L1_T1" in row["reference"] and "h100" not in row["reference"]


def test_a_pair_repeated_in_one_corpus_is_judged_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --reuse, a second record of a pair takes the first one's row (this audit's
    own store is a source); a repeat of a pair whose first row is an error is judged."""
    from kernelgate.audit.judge import ERROR

    judged = counting_executor(
        monkeypatch, lambda r: {"verdict": ERROR} if r.id == "x/L1/T3" else {}
    )
    corpus = cuda_l1(
        tmp_path / "x.jsonl",
        [(1, "honest"), (2, "nan_swallow"), (1, "honest"), (3, "crash"), (3, "crash")],
    )
    lines: list[str | None] = []
    outcome = audit(corpus, tmp_path / "out", on_plan=lambda plan: lines.append(plan.reuse))
    assert judged == ["x/L1/T1", "x/L1/T2", "x/L1/T3", "x/L1/T3~2"]
    rows = stored_rows(tmp_path / "out")
    assert rows["x/L1/T1~2"]["reused_from"] == {
        "audit": str((tmp_path / "out").resolve()),
        "source": "x.jsonl",
        "id": "x/L1/T1",
    }
    assert rows["x/L1/T1~2"]["verdict"] == "verified"
    assert rows["x/L1/T1~2"]["source_ids"]["line"] == 3
    assert "reused_from" not in rows["x/L1/T3~2"]
    assert outcome.reused_now == 1 and outcome.judged_now == 4
    assert lines == [
        "reusing 2 record(s) judged before: 2 repeating a pair judged earlier in this run"
    ]
    assert outcome.summary["reused"]["rows"] == 1


@pytest.mark.parametrize("case", ["missing", "no store", "not a folder", "corrupt store"])
def test_a_bad_reuse_folder_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """A --reuse folder that is missing, no audit's, or holds a store that cannot be read
    is refused before anything is judged, saying what is wrong and what to do."""
    counting_executor(monkeypatch)
    folder = tmp_path / "other"
    expected = {
        "missing": "no such folder",
        "no store": "not an audit folder (it holds no audit.sqlite)",
        "not a folder": "not a folder",
        "corrupt store": "cannot read its audit store audit.sqlite",
    }[case]
    if case == "no store":
        folder.mkdir()
    elif case == "not a folder":
        folder.write_text("")
    elif case == "corrupt store":
        folder.mkdir()
        (folder / STORE_NAME).write_bytes(b"not a database at all" * 100)
    with pytest.raises(KernelgateError) as caught:
        audit(write_pairs(tmp_path / "corpus", ["honest"]), tmp_path / "out", reuse=[folder])
    message = str(caught.value)
    assert message.startswith(f"--reuse {folder}: {expected}")
    assert "leave this --reuse out" in message
    assert not (tmp_path / "out").exists()  # nothing started


def test_the_command_line_says_what_is_wrong_with_a_reuse_folder(tmp_path: Path) -> None:
    corpus = write_pairs(tmp_path / "corpus", ["honest"])
    result = kernelgate(*audit_command(corpus, tmp_path / "out", "--reuse", str(tmp_path / "nope")))
    assert result.returncode == 2
    assert "--reuse" in result.stderr and "no such folder" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_row_whose_evidence_changed_is_not_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Evidence that is no longer what its judge wrote vouches for nothing: that pair is
    judged again; the other's evidence is copied, byte for byte, into this audit's folder."""
    from kernelgate.audit.judge import evidence_path

    judged = counting_executor(monkeypatch)
    names = ["honest", "nan_swallow"]
    audit(write_pairs(tmp_path / "first", names), tmp_path / "out-first")
    evidence_path(tmp_path / "out-first", "honest").write_text("[]")
    judged.clear()
    outcome = audit(
        write_pairs(tmp_path / "second", names), tmp_path / "out", reuse=[tmp_path / "out-first"]
    )
    assert judged == ["honest"]
    copied = evidence_path(tmp_path / "out", "nan_swallow")
    assert copied.read_bytes() == evidence_path(tmp_path / "out-first", "nan_swallow").read_bytes()
    assert outcome.summary["evidence_integrity"]["verified"] == 2


def test_the_resume_command_keeps_reusing() -> None:
    """An interrupted audit's resume command repeats its --reuse folders: the records left
    may be found there too."""
    from kernelgate.audit.command import resume_command

    words = resume_command(
        Path("a100.jsonl"),
        Path("out"),
        fmt="auto",
        problems=None,
        device="cuda",
        workers=None,
        executor="local",
        ray_address=None,
        limit=None,
        timeout=60.0,
        host_memory=None,
        reuse=[Path("audit-h100"), Path("audit l40")],
    )
    assert words.endswith("--reuse audit-h100 --reuse 'audit l40' --resume")
