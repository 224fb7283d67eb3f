"""The static layer: each defect caught by its rule and only by it; controls clean; the
policy (forbidden names, hard rules) reaching the verdict's rules; the verdict combining them.

The candidates here are read, never imported (a defect file would patch torch on import)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelgate.gates.base import GateKind, GateResult, Status
from kernelgate.static import RULE_IDS, Severity, StaticPolicy, analyse, rule_results
from kernelgate.verdict import Outcome, combine

CASES = Path(__file__).parent / "static_cases"
REPO = Path(__file__).parent.parent
FORBID = ("torch.topk",)
# the rules whose flags must be precise: an honest kernel raises none of them
PRECISE = {"STATIC-TIMING", "STATIC-MONKEYPATCH", "STATIC-IO", "STATIC-FOREIGN-STATE"}

DEFECTS = {
    "defect_timing.py": "STATIC-TIMING",
    "defect_downcast.py": "STATIC-DOWNCAST",
    "defect_backend.py": "STATIC-BACKEND",
    "defect_cache.py": "STATIC-CACHE",
    "defect_graph.py": "STATIC-GRAPH",
    "defect_fallback.py": "STATIC-FALLBACK",
    "defect_foreign_state.py": "STATIC-FOREIGN-STATE",
    "defect_monkeypatch.py": "STATIC-MONKEYPATCH",
    "defect_io.py": "STATIC-IO",
    "defect_vendored.py": "STATIC-VENDORED",
    "defect_forbidden.py": "FORBID-01",
    "defect_forbidden_getattr.py": "FORBID-01",
    "defect_in_helper.py": "STATIC-MONKEYPATCH",
}
CONTROLS = [
    REPO / "examples/softmax/honest.py",
    REPO / "src/kernelgate/redteam/controls/autotuned_elementwise.py",
    REPO / "src/kernelgate/redteam/controls/softmax.py",
    REPO / "src/kernelgate/redteam/controls/matmul.py",
    CASES / "control_load_inline.py",
]


def test_every_rule_has_a_defect() -> None:
    assert set(DEFECTS.values()) == set(RULE_IDS)


@pytest.mark.parametrize("name", sorted(DEFECTS))
def test_defect_caught_by_its_rule_only(name: str) -> None:
    findings = analyse(CASES / name, StaticPolicy(forbidden=FORBID))
    assert {f.rule for f in findings} == {DEFECTS[name]}, [f.message for f in findings]
    assert all(f.line > 0 and f.file.endswith(".py") for f in findings)


@pytest.mark.parametrize("path", CONTROLS, ids=lambda p: p.name)
def test_controls_raise_no_hard_and_no_precise_flag(path: Path) -> None:
    findings = analyse(path, StaticPolicy(forbidden=FORBID))
    assert not [f for f in findings if f.severity is Severity.HARD]
    assert not [f for f in findings if f.rule in PRECISE], [f.message for f in findings]


def test_helper_file_of_the_candidate_folder_is_read() -> None:
    (finding,) = analyse(CASES / "defect_in_helper.py")
    assert finding.file == "local_helper_patch.py"
    assert finding.line == 5
    assert "torch.Tensor.__eq__" in finding.message


def test_forbidden_alias_reported_at_its_call_site() -> None:
    findings = analyse(CASES / "defect_forbidden.py", StaticPolicy(forbidden=FORBID))
    assert {f.line for f in findings} == {4, 9}  # the import and the call
    assert all(f.severity is Severity.HARD for f in findings)
    assert analyse(CASES / "defect_forbidden.py") == []  # nothing forbidden: nothing found


def test_forbidden_name_covers_what_is_under_it(tmp_path: Path) -> None:
    candidate = tmp_path / "cand.py"
    candidate.write_text(
        "import fla.ops\nfrom fla.ops.kda import chunk_kda\n"
        "def f(x):\n    return fla.ops.kda.fused(x), x.topk(3)\n"
    )
    findings = analyse(candidate, StaticPolicy(forbidden=("fla.ops.kda", "torch.topk")))
    forbidden = sorted(f.line for f in findings if f.rule == "FORBID-01")
    assert forbidden == [2, 4, 4]  # the import, fla.ops.kda.fused and x.topk
    assert {f.rule for f in findings} == {"FORBID-01", "STATIC-VENDORED"}  # fla by name


def test_downcast_silent_under_a_half_contract() -> None:
    policy = StaticPolicy(float32_contract=False)
    assert analyse(CASES / "defect_downcast.py", policy) == []


def test_backend_switch_restored_in_finally_says_so(tmp_path: Path) -> None:
    candidate = tmp_path / "cand.py"
    candidate.write_text(
        "import torch\n"
        "def f(x):\n"
        "    old = torch.backends.cudnn.benchmark\n"
        "    torch.backends.cudnn.benchmark = True\n"
        "    try:\n"
        "        return x\n"
        "    finally:\n"
        "        torch.backends.cudnn.benchmark = old\n"
    )
    (finding,) = analyse(candidate)
    assert finding.line == 4 and "restored in a finally" in finding.message


def test_clock_that_only_logs_is_not_a_timing_branch(tmp_path: Path) -> None:
    candidate = tmp_path / "cand.py"
    candidate.write_text(
        "import time\ndef f(x):\n    t = time.perf_counter()\n    y = x * 2\n"
        "    print(time.perf_counter() - t)\n    return y\n"
    )
    assert analyse(candidate) == []


def test_hard_policy_turns_a_flag_into_a_rule_failure() -> None:
    hard = frozenset({"STATIC-IO"})
    findings = analyse(CASES / "defect_io.py", StaticPolicy(hard=hard))
    assert [f.severity for f in findings] == [Severity.HARD]
    forbid_entry, io_entry = rule_results(findings, (), hard)
    assert (forbid_entry.id, forbid_entry.status) == ("FORBID-01", Status.SKIPPED)
    assert (io_entry.id, io_entry.status) == ("STATIC-IO", Status.FAIL)
    assert io_entry.where == ["defect_io.py:8"]
    with pytest.raises(ValueError, match="unknown static rule"):
        analyse(CASES / "defect_io.py", StaticPolicy(hard=frozenset({"STATIC-NOPE"})))


def test_failed_rule_rejects_whatever_the_gates_say() -> None:
    findings = analyse(CASES / "defect_forbidden.py", StaticPolicy(forbidden=FORBID))
    rules = rule_results(findings, FORBID)
    assert [r.status for r in rules] == [Status.FAIL]
    passing = [GateResult("CMP-01", GateKind.THRESHOLDED, "values", Status.PASS, "ok")]
    assert combine(passing, rules)[0] is Outcome.REJECTED
    assert combine(passing, rule_results([], FORBID))[0] is Outcome.VERIFIED


def test_audit_summary_counts_static_flags_and_rule_failures() -> None:
    from kernelgate.audit.report import static_rows, static_summary

    rows = [
        {"stage": "gates", "static_findings": ["STATIC-IO", "STATIC-IO"], "failed_rules": []},
        {
            "stage": "gates",
            "static_findings": ["FORBID-01", "STATIC-IO"],
            "failed_rules": ["FORBID-01"],
        },
        {"stage": "gates"},  # a row of a store written before the static layer
        {"stage": "load", "static_findings": ["STATIC-GRAPH"], "failed_rules": []},
    ]
    summary = static_summary(rows)
    assert summary["judged"] == 2 and summary["rows_without"] == 1
    assert summary["rules"]["STATIC-IO"] == {"records": 2, "findings": 3, "failed": 0}
    assert summary["rules"]["FORBID-01"] == {"records": 1, "findings": 1, "failed": 1}
    assert "STATIC-GRAPH" not in summary["rules"]  # not judged: not counted
    table = static_rows({"static": summary})
    assert ["FORBID-01", "1", "1", "1"] in table and ["STATIC-IO", "2", "3", "0"] in table
    assert static_rows({}) == [["-", "0", "0", "0"]]  # a summary of an older store
