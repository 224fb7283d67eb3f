"""A record's judge takes the code digest from its request instead of parsing every module
of kernelgate again (1-2 s a record), and writes nothing for it anywhere."""

from __future__ import annotations

import json

import pytest

from kernelgate.audit import judge


@pytest.fixture
def restored():
    yield
    judge._given_code_digest = None


def test_a_given_digest_is_taken_and_a_malformed_one_ignored(restored) -> None:
    computed = judge.code_digest()
    judge.take_code_digest("not a digest")
    assert judge.code_digest() == computed
    judge.take_code_digest("0123456789ab")
    assert judge.code_digest() == "0123456789ab"


def test_the_judge_request_carries_the_parents_digest(tmp_path, monkeypatch) -> None:
    """``judge_isolated`` writes it into request.json, which the judge child reads first."""
    seen: dict = {}

    class Stop(Exception):
        pass

    def no_judge(*args, **kwargs):
        seen.update(
            json.loads((next((tmp_path / "records").iterdir()) / "request.json").read_text())
        )
        raise Stop

    monkeypatch.setattr(judge.subprocess, "Popen", no_judge)
    record = judge.CorpusRecord(id="r", format="pairs", reference_source="x", candidate_source="y")
    with pytest.raises(Stop):
        judge.judge_isolated(record, judge.AuditOptions(out_dir=str(tmp_path)))
    assert seen["code_digest"] == judge.code_digest()
