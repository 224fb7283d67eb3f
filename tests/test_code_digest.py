"""A record's judge takes the code digest from its request instead of parsing every module
of kernelgate again (1-2 s a record), and writes nothing for it anywhere."""

from __future__ import annotations

import json
from pathlib import Path

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


def test_the_shipped_kernels_and_training_are_not_in_the_digest(tmp_path) -> None:
    """Work on kernelgate.kernels or kernelgate.training leaves the digest as it was (an audit
    judged before it can still be reused or resumed); a change to a gate does not."""
    for relative in ("gates/gate.py", "kernels/gdn/chunk.py", "training/mqar.py"):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("def f():\n    return 1\n")
    before = judge.tree_digest(tmp_path)
    for relative in ("kernels/gdn/chunk.py", "training/mqar.py"):
        (tmp_path / relative).write_text("def f():\n    return 2\n")
    (tmp_path / "kernels" / "new.py").write_text("x = 1\n")
    assert judge.tree_digest(tmp_path) == before
    (tmp_path / "gates" / "gate.py").write_text("def f():\n    return 2\n")
    assert judge.tree_digest(tmp_path) != before


def test_no_judge_module_imports_the_packages_left_out_of_the_digest() -> None:
    """What ``NOT_THE_JUDGE`` leaves out must never take part in judging: no module outside
    those subpackages imports them (a mention in a docstring or comment is no import)."""
    import ast

    import kernelgate

    root = Path(kernelgate.__file__).resolve().parent
    left_out = {f"kernelgate.{name}" for name in judge.NOT_THE_JUDGE}
    importers = []
    for path in root.rglob("*.py"):
        relative = path.relative_to(root)
        if relative.parts[0] in judge.NOT_THE_JUDGE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            if any(n == m or n.startswith(m + ".") for n in names for m in left_out):
                importers.append(str(relative))
    assert importers == []
