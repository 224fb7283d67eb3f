"""The gate journal: a verification killed mid-way resumes at the next gate, never on
another candidate's gates, and never on a gate that ran out of device memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelgate.audit.judge import behaviour_of, code_digest
from kernelgate.gates import GATE_IDS
from kernelgate.gates.base import GateKind, GateResult, Incident, Status
from kernelgate.journal import GateJournal, journal_key
from kernelgate.pipeline import verify

from .conftest import SOFTMAX

REFERENCE, HONEST = SOFTMAX / "reference.py", SOFTMAX / "honest.py"


def statuses(verdict) -> dict[str, str]:
    return {gate.id: gate.status.value for gate in verdict.gates}


@pytest.fixture(scope="module")
def journaled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, str]]:
    """A whole verification of the honest softmax, journaled (and its gates' statuses)."""
    path = tmp_path_factory.mktemp("journal") / "gates.jsonl"
    key = journal_key(REFERENCE, HONEST, device="cpu")
    verdict = verify(REFERENCE, HONEST, journal=GateJournal(path, key))
    return path, key, statuses(verdict)


def test_every_finished_gate_is_journaled_in_order(journaled) -> None:
    path, key, fresh = journaled
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"schema": "kernelgate.gate-journal/1", "key": key}
    assert [json.loads(line)["gate"]["id"] for line in lines[1:]] == list(GATE_IDS)
    assert fresh == {gate: "pass" for gate in GATE_IDS}


def test_a_killed_verification_resumes_at_the_next_gate(journaled, tmp_path: Path) -> None:
    """Four gates and a line torn by the kill: the four are taken as they are, the torn one
    and the rest run again, and the verdict is the one a fresh verification gives."""
    path, key, fresh = journaled
    lines = path.read_text().splitlines()
    killed = tmp_path / "gates.jsonl"
    killed.write_text("\n".join(lines[:5]) + "\n" + lines[5][: len(lines[5]) // 2])
    journal = GateJournal(killed, key)
    started: list[str] = []
    verdict = verify(
        REFERENCE,
        HONEST,
        journal=journal,
        on_gate=lambda gate, result: started.append(gate) if result is None else None,
    )
    assert journal.resumed == list(GATE_IDS[:4])
    assert statuses(verdict) == fresh
    taken = {json.loads(line)["gate"]["id"]: json.loads(line)["gate"] for line in lines[1:5]}
    for gate in verdict.gates[:4]:  # the journal's results, not new runs
        assert gate.to_dict() == taken[gate.id]
    assert started == list(GATE_IDS)  # every gate is reported, resumed or run
    again = killed.read_text().splitlines()
    assert [json.loads(line)["gate"]["id"] for line in again[1:]] == list(GATE_IDS)


def test_a_journal_for_other_programs_or_settings_is_discarded(journaled, tmp_path: Path) -> None:
    path, key, _ = journaled
    other = tmp_path / "gates.jsonl"
    other.write_text(path.read_text())
    wrong_key = journal_key(REFERENCE, SOFTMAX / "nan_swallow.py", device="cpu")
    assert wrong_key != key != journal_key(REFERENCE, HONEST, device="cuda")
    journal = GateJournal(other, wrong_key)
    assert journal.load() == ({}, [], None) and journal.resumed == []
    assert other.read_text().splitlines() == [
        json.dumps({"schema": "kernelgate.gate-journal/1", "key": wrong_key})
    ]


def _gate(gate_id: str) -> GateResult:
    return GateResult(gate_id, GateKind.EXACT, gate_id, Status.PASS, "ok")


def test_the_journal_ends_before_a_gate_that_ran_out_of_device_memory(tmp_path: Path) -> None:
    """Such a record is retried with fewer judges beside it: that gate must run again, and
    what follows it too; a hang's halt carries over to the gates after it."""
    journal = GateJournal(tmp_path / "gates.jsonl", "k")
    journal.load()
    hung = Incident("CMP-02", "case 0", 1, "timeout", "no answer in 2 s")
    oom = Incident("CMP-03", "case 1", 2, "error", "torch.OutOfMemoryError: CUDA out of memory")
    journal.record(_gate("CMP-01"), [], None)
    journal.record(_gate("CMP-02"), [hung], "candidate hung in CMP-02 (case 0)")
    journal.record(_gate("CMP-03"), [oom], "candidate hung in CMP-02 (case 0)")
    journal.record(_gate("PRC-01"), [], "candidate hung in CMP-02 (case 0)")
    resumed = GateJournal(tmp_path / "gates.jsonl", "k")
    gates, incidents, halted = resumed.load()
    assert list(gates) == ["CMP-01", "CMP-02"] == resumed.resumed
    assert incidents == [hung] and halted == "candidate hung in CMP-02 (case 0)"
    assert len((tmp_path / "gates.jsonl").read_text().splitlines()) == 3  # header + two


def test_the_code_digest_ignores_docstrings_and_comments_but_not_code() -> None:
    """Editing a docstring must not throw away journaled device work; a code edit must."""
    original = b'"""Module."""\n\ndef f(x):\n    """Why."""\n    return x + 1  # note\n'
    reworded = (
        b'"""Module, reworded."""\n\n\ndef f(x):\n    """Why, at length."""\n\n    return x + 1\n'
    )
    undocumented = b"def f(x):\n    return x + 1\n"
    changed = b'"""Module."""\n\ndef f(x):\n    """Why."""\n    return x + 2  # note\n'
    assert behaviour_of(original) == behaviour_of(reworded) == behaviour_of(undocumented)
    assert behaviour_of(original) != behaviour_of(changed)
    only_a_docstring = b'class C:\n    """Doc."""\n'
    assert behaviour_of(only_a_docstring) == behaviour_of(b"class C:\n    pass\n")
    assert len(code_digest()) == 12


def test_an_audit_s_gate_selection_enters_the_record_key_and_its_rows(tmp_path: Path) -> None:
    """A partial audit (``--only``) keys its journals and old-check results by its gates,
    and a row another selection judged is never recovered as this one's."""
    from kernelgate.audit.judge import AuditOptions, finished_but_unstored, record_key
    from kernelgate.formats.corpus import CorpusRecord

    full = AuditOptions(str(tmp_path))
    partial = AuditOptions(str(tmp_path), only=["EXC-01"])  # as request.json gives it
    assert partial.only == ("EXC-01",) and partial.gates_selected == ["EXC-01"]
    assert full.gates_selected is None
    keys = {
        record_key(REFERENCE, HONEST, options)
        for options in (full, partial, AuditOptions(str(tmp_path), only=("CMP-01", "EXC-01")))
    }
    assert len(keys) == 3
    assert record_key(REFERENCE, HONEST, partial) == record_key(
        REFERENCE, HONEST, AuditOptions(str(tmp_path), only=("EXC-01",))
    )
    record = CorpusRecord(id="r", format="pairs", reference_path="a.py", candidate_path="b.py")
    result = tmp_path / "result.json"
    result.write_text(json.dumps({"id": "r", "judged_with": code_digest(), "only": ["EXC-01"]}))
    assert finished_but_unstored(record, result, partial) is not None
    assert finished_but_unstored(record, result, full) is None


def test_an_audit_s_gate_selection_is_checked_and_put_in_the_pipeline_s_order() -> None:
    from kernelgate.audit.runner import gate_selection
    from kernelgate.errors import KernelgateError

    assert gate_selection(None) is None and gate_selection([]) is None
    assert gate_selection(["RES-01,EXC-01", "CMP-01", "EXC-01"]) == ("CMP-01", "EXC-01", "RES-01")
    with pytest.raises(KernelgateError, match=r"unknown gate.*--only: CMP-9"):
        gate_selection(["CMP-01,CMP-9"])
    with pytest.raises(KernelgateError, match="--only"):
        gate_selection([","])
