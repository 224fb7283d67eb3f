"""Problem folders (formats/problem.py): each rule of issue 21 part 4 tested.

Declared shapes (a solution wrong at one declared shape only is rejected by SHAPES-01),
state_dict sharing (a solution with the reference's parameters and its own initialisation
is verified; renamed parameters fail to load, saying why), the forbidden list of
problem.yaml (FORBID-01), the yaml tolerance deciding the folder's own old check, and the
audit corpus of runs. The gates are cut to CMP-01 where the rules, not the gates, are the
subject.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kernelgate.errors import CandidateLoadError
from kernelgate.formats.corpus import read_corpus
from kernelgate.formats.problem import ProblemError, load_problem, read_problem_runs
from kernelgate.gates.base import Status
from kernelgate.pipeline import verify
from kernelgate.verdict import Outcome

from .conftest import audit_command, kernelgate

ROOT = Path(__file__).parent.parent
SOFTMAX = ROOT / "examples" / "problems" / "softmax"
LINEAR = ROOT / "examples" / "problems" / "linear"
DATA = Path(__file__).parent / "data" / "problems"


def judged(folder: Path, solution: Path, **options: object) -> object:
    problem = load_problem(folder)
    return verify(problem.reference, solution, problem=problem, only=["CMP-01"], **options)


def rule(verdict: object, rule_id: str) -> object:
    return next(r for r in verdict.rules if r.id == rule_id)  # type: ignore[attr-defined]


# -- the folder -----------------------------------------------------------------------------


def test_problem_folder_read_as_stated() -> None:
    problem = load_problem(SOFTMAX)
    assert (problem.name, problem.precision) == ("row_softmax", "float32")
    assert problem.tolerance_for("float32") == 1e-5
    assert "torch.nn.functional.softmax" in problem.forbidden
    assert problem.shapes[1] == {"batch": 3, "dim": 257}
    assert problem.flops == "5 * batch * dim"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: (d / "problem.yaml").unlink(), "lacks problem.yaml"),
        (lambda d: (d / "shapes.py").write_text("SHAPES = [{'rows': 3}]\n"), "rows"),
        (lambda d: (d / "shapes.py").write_text("SHAPES = []\n"), "non-empty list"),
        (
            lambda d: (d / "problem.yaml").write_text("name: x\ntolerance: {float16: 0.1}\n"),
            "no entry for its precision float32",
        ),
        (
            lambda d: (d / "problem.yaml").write_text("name: x\ntolerance: 1e-3\nspeed: 2\n"),
            "speed",
        ),
    ],
)
def test_malformed_folder_is_a_clear_problem_error(
    tmp_path: Path, change: object, message: str
) -> None:
    folder = tmp_path / "softmax"
    shutil.copytree(SOFTMAX, folder)
    change(folder)  # type: ignore[operator]
    with pytest.raises(ProblemError, match=message):
        load_problem(folder)


# -- the rules ------------------------------------------------------------------------------


def test_honest_solution_verified_at_every_declared_shape() -> None:
    verdict = judged(SOFTMAX, SOFTMAX / "solution.py")
    assert verdict.verdict is Outcome.VERIFIED, verdict.rules
    shapes = rule(verdict, "SHAPES-01")
    assert shapes.status is Status.PASS and "all 3 declared" in shapes.message
    assert rule(verdict, "FORBID-01").status is Status.PASS
    assert verdict.problem["name"] == "row_softmax"


def test_failure_at_one_declared_shape_rejects() -> None:
    verdict = judged(SOFTMAX, DATA / "softmax_wrong_at_257.py")
    assert verdict.verdict is Outcome.REJECTED
    assert verdict.failed_rules == ["SHAPES-01"] and verdict.failed_gates == []
    shapes = rule(verdict, "SHAPES-01")
    assert len(shapes.where) == 1 and "dim=257" in shapes.where[0]


def test_forbidden_list_of_problem_yaml_rejects() -> None:
    verdict = judged(SOFTMAX, DATA / "softmax_forbidden.py")
    assert verdict.failed_rules == ["FORBID-01"]
    forbid = rule(verdict, "FORBID-01")
    assert "softmax_forbidden.py:10" in forbid.where  # the static site
    assert any(w.startswith("softmax_forbidden.py:10 (torch call") for w in forbid.where)


def test_weights_shared_from_the_reference_not_from_a_seed() -> None:
    verdict = judged(LINEAR, DATA / "linear_other_init.py")
    assert verdict.verdict is Outcome.VERIFIED, (verdict.failed_gates, verdict.rules)
    assert rule(verdict, "SHAPES-01").status is Status.PASS  # rebuilt at other sizes too


def test_mismatched_parameters_fail_to_load_saying_why() -> None:
    with pytest.raises(
        CandidateLoadError, match=r"(?s)load_state_dict strict=True.*Unexpected.*proj\.weight"
    ):
        judged(LINEAR, DATA / "linear_renamed.py")


def test_solution_must_define_model() -> None:
    with pytest.raises(CandidateLoadError, match="defines no top-level `Model`"):
        judged(SOFTMAX, ROOT / "examples" / "softmax" / "honest.py")


# -- the folder's own old check -------------------------------------------------------------


def test_old_check_uses_the_yaml_tolerance_every_shape_three_seeds(tmp_path: Path) -> None:
    from kernelgate.audit.oldcheck import run_old_check

    honest = run_old_check(SOFTMAX, SOFTMAX / "solution.py", device="cpu", timeout=60)
    assert honest["status"] == "accepted" and honest["trials"] == 9, honest
    assert honest["tolerance_current"] == 1e-5
    loose = DATA / "softmax_loose.py"
    strict = run_old_check(SOFTMAX, loose, device="cpu", timeout=60)
    assert strict["status"] == "rejected" and strict["passed_current"] < 9
    folder = tmp_path / "softmax"
    shutil.copytree(SOFTMAX, folder)
    yaml_text = (folder / "problem.yaml").read_text().replace("1.0e-5", "1.0e-3")
    (folder / "problem.yaml").write_text(yaml_text)
    lenient = run_old_check(folder, loose, device="cpu", timeout=60)
    assert lenient["status"] == "accepted" and lenient["tolerance_current"] == 1e-3


# -- the audit corpus and the command line --------------------------------------------------


def test_corpus_of_runs_names_its_problems(tmp_path: Path) -> None:
    for name, solution, problem in [
        ("a", SOFTMAX / "solution.py", "../../softmax"),
        ("b", DATA / "linear_other_init.py", str(LINEAR.resolve())),
        ("c", SOFTMAX / "solution.py", "../../missing"),
    ]:
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        shutil.copy(solution, run / "solution.py")
        (run / "run.yaml").write_text(f"problem: {problem}\nverdict: accepted\n")
    shutil.copytree(SOFTMAX, tmp_path / "softmax")
    records = list(read_problem_runs(tmp_path / "runs"))
    assert [r.id for r in records] == ["a", "b", "c"]
    assert records[0].unreadable is None and records[0].source_verdict == "accepted"
    assert records[0].source_ids["problem"] == str((tmp_path / "softmax").resolve())
    assert records[1].reference_path == str(LINEAR.resolve() / "reference.py")
    assert "problem folder not found" in str(records[2].unreadable)
    assert [r.id for r in read_corpus(tmp_path / "runs", "problem")] == ["a", "b", "c"]


def test_cli_verifies_a_problem_folder() -> None:
    result = kernelgate(
        "verify", str(SOFTMAX), str(DATA / "softmax_wrong_at_257.py"), "--only", "CMP-01"
    )
    assert result.returncode == 1, result.stderr
    assert "rule SHAPES-01 failed" in result.stdout


def test_audit_of_a_problem_corpus_judges_by_the_folder(tmp_path: Path) -> None:
    import json
    import sqlite3

    from kernelgate.audit.store import STORE_NAME

    for name, solution in [
        ("honest", SOFTMAX / "solution.py"),
        ("wrong", DATA / "softmax_wrong_at_257.py"),
    ]:
        run = tmp_path / "runs" / name
        run.mkdir(parents=True)
        shutil.copy(solution, run / "solution.py")
        (run / "run.yaml").write_text(f"problem: {SOFTMAX.resolve()}\nverdict: accepted\n")
    out = tmp_path / "out"
    # the solutions are torch code, not kernels: AUTH-01 (on by default for problem records)
    # would reject both, and this test is about judging by the folder
    command = audit_command(
        tmp_path / "runs", out, "--format", "problem", "--only", "CMP-01", "--no-authorship-rule"
    )
    result = kernelgate(*command, timeout=600)
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(out / STORE_NAME) as db:
        rows = {i: json.loads(d) for i, d in db.execute("SELECT id, data FROM rows")}
    honest, wrong = rows["honest"], rows["wrong"]
    assert honest["verdict"] == "verified" and honest["old_check"] == "accepted"
    assert honest["old_check_detail"]["trials"] == 9
    assert wrong["verdict"] == "rejected" and wrong["failed_rules"] == ["SHAPES-01"]
    assert wrong["old_check"] == "rejected"  # the folder's own rule sees dim=257 too
    assert str(SOFTMAX.resolve()) in wrong["replay"]
