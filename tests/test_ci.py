"""``kernelgate verify --sarif`` (issue 23, part 5): SARIF 2.1.0 for code-scanning views,
one result per failed gate or rule, located in the candidate's file."""

from __future__ import annotations

import json
from pathlib import Path

from kernelgate.ci import failure_text, model_line, sarif_log

from .conftest import SOFTMAX, kernelgate

NAN_SWALLOW = SOFTMAX / "nan_swallow.py"


def evidence(**extra: object) -> dict:
    """A rejected verdict's JSON: CMP-01 failed with a counterexample, FORBID-01 failed."""
    return {
        "verdict": "rejected",
        "reference": "examples/softmax/reference.py",
        "candidate": str(NAN_SWALLOW.relative_to(SOFTMAX.parents[1])),
        "failed_gates": ["CMP-01"],
        "failed_rules": ["FORBID-01"],
        "skipped": ["RES-02: needs a device"],
        "gates": [
            {
                "id": "EXC-01",
                "title": "non-finite propagation",
                "kind": "tolerance-free",
                "status": "pass",
                "reason": "ok",
                "counterexample": None,
            },
            {
                "id": "CMP-01",
                "title": "values",
                "kind": "thresholded",
                "status": "fail",
                "reason": "error exceeds the bound",
                "counterexample": {
                    "case": "dist=normal",
                    "seed": 7,
                    "inputs": [
                        {
                            "shape": [2, 3],
                            "stride": [3, 1],
                            "dtype": "float32",
                            "layout": "contiguous",
                        }
                    ],
                    "findings": [{"output_position": [0, 1], "expected": 1.0, "actual": 2.0}] * 5,
                    "replay": "kernelgate verify R C --device cpu --only CMP-01",
                },
            },
        ],
        "rules": [
            {
                "id": "FORBID-01",
                "status": "fail",
                "message": "torch.softmax is forbidden",
                "where": ["kernels/cand.py:12"],
            }
        ],
        **extra,
    }


def test_sarif_has_one_error_per_failed_gate_or_rule_at_its_place() -> None:
    log = sarif_log(evidence(), "0.1.0")
    assert log["version"] == "2.1.0" and "sarif-2.1.0" in log["$schema"]
    run = log["runs"][0]
    assert [r["id"] for r in run["tool"]["driver"]["rules"]] == ["CMP-01", "FORBID-01"]
    gate, rule = run["results"]
    assert gate["ruleId"] == "CMP-01" and gate["level"] == "error" and gate["ruleIndex"] == 0
    where = gate["locations"][0]["physicalLocation"]
    assert where["artifactLocation"] == {
        "uri": "examples/softmax/nan_swallow.py",
        "uriBaseId": "%SRCROOT%",
    }
    assert where["region"]["startLine"] == model_line(str(NAN_SWALLOW)) > 1  # class ModelNew
    assert "replay: kernelgate verify R C" in gate["message"]["text"]
    assert "2 more in the evidence" in gate["message"]["text"]
    assert gate["properties"]["counterexample"]["seed"] == 7
    located = rule["locations"][0]["physicalLocation"]
    assert located["artifactLocation"]["uri"] == "kernels/cand.py"
    assert located["region"]["startLine"] == 12
    assert run["properties"]["skipped"] == ["RES-02: needs a device"]
    verified = evidence(verdict="verified", failed_gates=[], failed_rules=[], gates=[], rules=[])
    assert sarif_log(verified)["runs"][0]["results"] == []


def test_failure_text_tells_each_failure_with_its_replay() -> None:
    text = failure_text(evidence())
    assert text.startswith("kernelgate verdict: rejected (failed: CMP-01, FORBID-01)")
    assert "CMP-01 (values): error exceeds the bound" in text
    assert "replay: kernelgate verify R C --device cpu --only CMP-01" in text
    assert "FORBID-01: torch.softmax is forbidden (at kernels/cand.py:12)" in text
    assert "EXC-01" not in text  # passed gates are not told


def test_verify_writes_sarif_beside_its_verdict(tmp_path: Path) -> None:
    out = tmp_path / "verdict.sarif"
    result = kernelgate(
        "verify",
        str(SOFTMAX / "reference.py"),
        str(NAN_SWALLOW),
        "--only",
        "EXC-01",
        "--sarif",
        str(out),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    log = json.loads(out.read_text())
    results = log["runs"][0]["results"]
    assert [r["ruleId"] for r in results] == ["EXC-01"]
    assert results[0]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].endswith(
        "nan_swallow.py"
    )
    assert "--only EXC-01" in results[0]["properties"]["replay"]
    assert not list(tmp_path.glob("*.partial"))
