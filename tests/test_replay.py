"""``kernelgate replay``: a saved verdict's failures re-run from the evidence alone, bit for
bit (counterexample case, seed, inputs, findings and the gate's reason), and bad input
refused with exit 2. (An EXC-01 value failure and its shrunk case replay in test_shrink.py,
from one verification.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelgate.cli import point_replays_at
from kernelgate.errors import KernelgateError
from kernelgate.pipeline import verify
from kernelgate.replay import GONE, REPRODUCED, differences, replay

from .conftest import DATA, ROOT, SOFTMAX, kernelgate


def _evidence(tmp_path: Path, reference: Path, candidate: Path, *only: str, **options) -> Path:
    """Verify with the CLI's evidence form (replay strings pointing at the file) and save it;
    paths relative to the repository root, as the CLI records what it is given."""
    out = tmp_path / f"{candidate.stem}.json"
    verdict = verify(
        reference.relative_to(ROOT), candidate.relative_to(ROOT), only=list(only), **options
    )
    point_replays_at(verdict, out)
    out.write_text(verdict.to_json())
    return out


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # evidence names programs relative to where verify ran


def test_structure_failures_of_two_gates_replay_and_a_fixed_candidate_no_longer_fails(
    tmp_path: Path,
) -> None:
    candidate = ROOT / "tests" / "data" / "softmax_drops_last_row.py"
    out = _evidence(tmp_path, SOFTMAX / "reference.py", candidate, "CMP-01", "EXC-01")
    report = replay(out)
    assert {g.gate: g.outcome for g in report.gates} == {"CMP-01": REPRODUCED, "EXC-01": REPRODUCED}
    cmp01 = next(g for g in report.gates if g.gate == "CMP-01")
    assert cmp01.counterexample["findings"][0]["problem"]  # a structure finding: shape
    # the same evidence against a candidate that was fixed since: refused, then replayed
    fixed = tmp_path / "fixed"
    fixed.mkdir()
    stored = json.loads(out.read_text())
    copy = fixed / "candidate.py"  # every row now (pure PyTorch: no interpreter time)
    copy.write_text(candidate.read_text().replace("x[:-1]", "x"))
    stored["judged_with"]["command"][3] = str(copy)
    out.write_text(json.dumps(stored))
    with pytest.raises(KernelgateError, match=r"changed since the verdict.*--allow-changed"):
        replay(out, ["CMP-01"])
    report = replay(out, ["CMP-01"], allow_changed=True)
    assert report.changed == [f"candidate {copy}"]
    assert [(g.gate, g.outcome) for g in report.gates] == [("CMP-01", GONE)]
    assert not report.still_fails


def test_layout_failure_and_the_access_trace_finding_it_caused_replay(tmp_path: Path) -> None:
    out = _evidence(
        tmp_path,
        DATA / "cmp_ew_reference.py",
        DATA / "cmp_contiguous_only.py",
        "CMP-02",
        contract=DATA / "cmp_ew_strided.toml",
    )
    stored = json.loads(out.read_text())
    assert stored["failed_gates"] == ["CMP-02", "RES-01"]
    report = replay(out)
    outcomes = {g.gate: (g.outcome, g.differences) for g in report.gates}
    assert outcomes == {"CMP-02": (REPRODUCED, []), "RES-01": (REPRODUCED, [])}
    layout = next(g for g in report.gates if g.gate == "CMP-02").counterexample["inputs"][0]
    assert layout["layout"] != "contiguous" and "stride" in layout


def test_unwritten_output_replays_through_mem01(tmp_path: Path) -> None:
    out = _evidence(tmp_path, SOFTMAX / "reference.py", SOFTMAX / "unwritten_tail.py", "MEM-01")
    (result,) = replay(out).gates
    assert (result.gate, result.outcome, result.differences) == ("MEM-01", REPRODUCED, [])
    assert result.how == "whole gate"  # its calls under two poisons are one sequence


def _fake_evidence(tmp_path: Path, **changes: object) -> Path:
    """A /2 evidence with one failed EXC-01 (nothing is run before the input is refused)."""
    data = {
        "schema": "kernelgate.verdict/2",
        "seed": 0,
        "reference": str(SOFTMAX / "reference.py"),
        "gates": [
            {
                "id": "EXC-01",
                "status": "fail",
                "reason": "r",
                "counterexample": {
                    "case": "inject=nan",
                    "seed": 1,
                    "inputs": [],
                    "findings": [],
                    "replay": "kernelgate verify A B --device cpu --only EXC-01 --seed 0",
                },
            }
        ],
        "judged_with": {
            "command": [
                "kernelgate",
                "verify",
                str(SOFTMAX / "reference.py"),
                str(SOFTMAX / "nan_swallow.py"),
                "--device",
                "cpu",
            ],
            "only": ["EXC-01"],
            "timeout": 60.0,
        },
        "reference_sha256": "0" * 64,
    } | changes
    path = tmp_path / "evidence.json"
    path.write_text(json.dumps(data))
    return path


def test_bad_input_is_refused_with_exit_2(tmp_path: Path) -> None:
    missing = kernelgate("replay", str(tmp_path / "nothing.json"))
    assert missing.returncode == 2 and "evidence file not found" in missing.stderr
    with pytest.raises(KernelgateError, match=r"schema .kernelgate\.verdict/1.; replay reads"):
        replay(_fake_evidence(tmp_path, schema="kernelgate.verdict/1"))
    with pytest.raises(KernelgateError, match=r"no failure of MEM-01 to replay.*EXC-01"):
        replay(_fake_evidence(tmp_path), ["MEM-01"])
    with pytest.raises(KernelgateError, match="unknown gate"):
        replay(_fake_evidence(tmp_path), ["XYZ-9"])
    with pytest.raises(KernelgateError, match=r"changed since the verdict.*reference"):
        replay(_fake_evidence(tmp_path))  # the reference's digest differs
    flags = _fake_evidence(
        tmp_path, judged_with={"command": ["kernelgate", "verify", "a", "b", "--new-flag"]}
    )
    with pytest.raises(KernelgateError, match="'--new-flag', unknown to replay"):
        replay(flags)


def test_a_changed_value_or_reason_is_a_difference_and_json_forms_compare_equal() -> None:
    stored = {
        "reason": "2 output position(s) of output 0 have the wrong IEEE class on inject=nan",
        "counterexample": {
            "case": "inject=nan",
            "seed": 5,
            "inputs": [{"shape": [2, 3]}],
            "findings": [{"output_position": [0, 1], "expected": "nan", "actual": 0.25}],
            "replay": "kernelgate replay a.json --gate EXC-01",
        },
    }
    # the same failure as the judge holds it (tuples, a float NaN) is no difference
    now = {
        "reason": stored["reason"],
        "counterexample": {
            "case": "inject=nan",
            "seed": 5,
            "inputs": [{"shape": (2, 3)}],
            "findings": [{"output_position": (0, 1), "expected": float("nan"), "actual": 0.25}],
            "replay": "kernelgate verify R C --only EXC-01 --seed 0",  # not compared
        },
    }
    assert differences(stored, now) == []
    now["counterexample"]["findings"][0]["actual"] = 0.2500001
    now["reason"] = now["reason"].replace("2 output", "3 output")
    found = differences(stored, now)
    assert [line.split(":")[0] for line in found] == ["findings", "reason"]
    assert '"actual": 0.25,' in found[0] and '"actual": 0.2500001,' in found[0]
