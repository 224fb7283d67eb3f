"""The command line: exit codes, one-line errors, the JSON evidence."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelgate.gates import GATE_IDS

from .conftest import DATA, SOFTMAX, kernelgate

REFERENCE = str(SOFTMAX / "reference.py")


def test_verified_exits_zero_and_writes_evidence(tmp_path: Path) -> None:
    out = tmp_path / "evidence.json"
    result = kernelgate("verify", REFERENCE, str(SOFTMAX / "honest.py"), "--json", str(out))
    assert result.returncode == 0, result.stderr
    assert "verified" in result.stdout
    evidence = json.loads(out.read_text())
    assert evidence["schema"] == "kernelgate.verdict/2"
    assert evidence["verdict"] == "verified"
    assert evidence["static"] == [] and evidence["failed_rules"] == []
    assert [(r["id"], r["status"]) for r in evidence["rules"]] == [("FORBID-01", "skipped")]
    assert [g["id"] for g in evidence["gates"]] == list(GATE_IDS)
    statuses = {g["id"]: g["status"] for g in evidence["gates"]}
    # In CPU mode nothing may fail; a gate that cannot run says so (never a silent pass).
    assert set(statuses.values()) <= {"pass", "skipped"}
    assert sorted(evidence["skipped"]) == sorted(
        f"{g['id']}: {g['reason']}" for g in evidence["gates"] if g["status"] == "skipped"
    )
    assert statuses["CMP-01"] == statuses["EXC-01"] == statuses["MEM-01"] == "pass"
    assert set(evidence["tolerance_free"]) | set(evidence["thresholded"]) == set(GATE_IDS)
    assert evidence["contract"]["schema"] == "kernelgate.contract/4"
    assert evidence["environment"]["triton_interpreter"] is True
    assert "EXC-01" in evidence["tolerance_free"] and "CMP-01" in evidence["thresholded"]


def test_forbidden_call_rejects_with_the_gates_kept(tmp_path: Path) -> None:
    out = tmp_path / "evidence.json"
    result = kernelgate(
        "verify",
        REFERENCE,
        str(SOFTMAX / "honest.py"),
        "--only",
        "CMP-01",
        "--forbid",
        "torch.empty_like",
        "--json",
        str(out),
    )
    assert result.returncode == 1, result.stderr
    assert "rule FORBID-01 failed" in result.stdout
    evidence = json.loads(out.read_text())
    assert evidence["verdict"] == "rejected"
    assert evidence["failed_rules"] == ["FORBID-01"] and evidence["failed_gates"] == []
    (rule,) = evidence["rules"]
    # the static site, then the same call as the worker saw it run (FORBID-01's dynamic half)
    assert rule["status"] == "fail" and rule["where"][0] == "honest.py:30"
    assert rule["where"][1:] == [
        "honest.py:30 (torch call `torch.empty_like`, call)",
        "honest.py:30 (aten op (dispatch) `aten.empty_like.default`, call)",
    ]
    assert next(g for g in evidence["gates"] if g["id"] == "CMP-01")["status"] == "pass"
    assert evidence["static"][0]["severity"] == "hard"


def test_rejected_exits_one_with_counterexample(tmp_path: Path) -> None:
    out = tmp_path / "evidence.json"
    result = kernelgate("verify", REFERENCE, str(SOFTMAX / "nan_swallow.py"), "--json", str(out))
    assert result.returncode == 1
    gate = next(g for g in json.loads(out.read_text())["gates"] if g["id"] == "EXC-01")
    assert gate["status"] == "fail"
    example = gate["counterexample"]
    assert example["seed"] > 0 and example["inputs"][0]["shape"] == [30, 1000]
    assert example["findings"][0]["expected_class"] == "NAN"
    # with an evidence file the replay is `kernelgate replay` of it; the verify command that
    # re-runs the whole gate stays beside it
    assert example["replay"] == f"kernelgate replay {out} --gate EXC-01"
    assert (
        example["verify"].startswith("kernelgate verify") and "--only EXC-01" in example["verify"]
    )


@pytest.mark.parametrize(
    ("candidate", "message"),
    [
        (DATA / "syntax_error.py", "syntax error"),
        (DATA / "no_modelnew.py", "defines no top-level `ModelNew`"),
        (DATA / "import_error.py", "failed to load"),
        (DATA / "does_not_exist.py", "not found"),
        (DATA / "cuda_extension.py", "needs a GPU"),
    ],
    ids=["syntax", "no-modelnew", "import-error", "missing-file", "cuda-on-cpu"],
)
def test_harness_errors_exit_two_without_traceback(candidate: Path, message: str) -> None:
    result = kernelgate("verify", REFERENCE, str(candidate))
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_bad_reference_and_unknown_gate_exit_two() -> None:
    result = kernelgate("verify", str(DATA / "no_modelnew.py"), str(SOFTMAX / "honest.py"))
    assert result.returncode == 2 and "lacks get_init_inputs, get_inputs" in result.stderr
    result = kernelgate("verify", REFERENCE, str(SOFTMAX / "honest.py"), "--only", "XYZ-99")
    assert result.returncode == 2 and "unknown gate" in result.stderr


def test_contract_command_prints_symbolic_dims() -> None:
    result = kernelgate("contract", REFERENCE)
    assert result.returncode == 0
    contract = json.loads(result.stdout)
    assert contract["inputs"][0]["shape"] == ["batch_size", "dim"]
    assert contract["provenance"]["source"] == "library"
    assert "softmax" in contract["provenance"]["detail"]
