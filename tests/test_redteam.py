"""The red team and the positive controls (``kernelgate.redteam``) and ``kernelgate calibrate``.

The CPU calibration tests are the slow ones of this file: every interpreter-expressible
defect and every control goes through ``verify`` (defects through their intended gates only,
controls through all twelve), one entry a test.
"""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelgate.cli import app
from kernelgate.gates import GATE_IDS
from kernelgate.redteam.catalog import CONTROLS, DEFECTS, entries
from kernelgate.redteam.runner import (
    CAUGHT,
    CPU_ONLY,
    DEVICE_ONLY,
    ERROR,
    OTHER_GATE,
    PASSED,
    RULE_OPTIONS,
    Calibration,
    EntryResult,
    calibrate,
)


def _top_level_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef):
            names.add(node.name)
    return names


def test_catalog_is_complete_and_well_formed() -> None:
    names = [e.name for e in entries()]
    assert len(names) == len(set(names)), "entry names must be unique"
    assert len(DEFECTS) >= 30 and len(CONTROLS) >= 15
    for entry in DEFECTS:
        assert entry.defect, entry.name
        assert entry.intended, entry.name
        assert set(entry.intended_gates) <= set(GATE_IDS), entry.name
        assert entry.device_only is None or len(entry.device_only) > 20, entry.name
        assert entry.cpu_only is None or len(entry.cpu_only) > 20, entry.name
        assert not (entry.cpu_only and entry.device_only), entry.name
    for entry in [*DEFECTS, *CONTROLS]:
        assert set(entry.rules_in_force) <= set(RULE_OPTIONS), entry.name  # the runner's
        assert {"Model", "get_inputs", "get_init_inputs"} <= _top_level_names(
            entry.reference_path
        ), entry.reference
        assert "ModelNew" in _top_level_names(entry.candidate_path), entry.candidate
    assert all(c.is_control and not c.defect for c in CONTROLS)
    assert not any(c.intended_rules for c in CONTROLS)
    with pytest.raises(KeyError):
        entries(["no_such_kernel"])


def _result(name: str, gates: list[str], rejected: list[str], control: bool = False):
    verdict = "rejected" if rejected else "verified"
    ratios = [
        {
            "gate": "CMP-01",
            "status": "fail" if "CMP-01" in rejected else "pass",
            "error_model": "ensemble",
            "worst_error_over_bound": 7.0 if rejected else 0.25,
        }
    ]
    return EntryResult(name, control, gates, verdict, rejected, ratios=ratios, seconds=1.0)


def test_confusion_matrix_margins_and_exit_rule() -> None:
    caught = _result("a", ["CMP-01"], ["CMP-01"])
    elsewhere = _result("b", ["ORD-02"], ["MEM-01"])
    missed = _result("c", ["ORD-02"], [])
    device = EntryResult("d", False, ["PRC-01"], DEVICE_ONLY, detail="no TF32")
    honest = _result("h", [], [], control=True)
    cal = Calibration("cpu", [caught, elsewhere, missed, device, honest])
    confusion = cal.confusion()
    assert confusion[CAUGHT] == ["a"] and confusion[OTHER_GATE] == ["b"]
    assert confusion[PASSED] == ["c"] and confusion[DEVICE_ONLY] == ["d"]
    assert not cal.ok
    assert cal.gate_catches()["MEM-01"] == {"defects": 1, "intended": 0, "controls": 0}
    margin = cal.margins()["ensemble"]
    assert margin["largest_honest"] == 0.25 and margin["smallest_defective"] == 7.0
    assert margin["separation"] == pytest.approx(28.0)
    assert Calibration("cpu", [caught, device, honest]).ok
    rejected_control = _result("h2", [], ["CMP-01"], control=True)
    assert not Calibration("cpu", [caught, rejected_control]).ok
    device_control = EntryResult("h3", True, [], DEVICE_ONLY, detail="bf16 in the interpreter")
    assert Calibration("cpu", [caught, device_control]).ok  # not run, so not rejected


def test_cpu_only_defects_are_not_run_on_a_device() -> None:
    """What only the interpreter's access trace sees is listed, not missed, on a device
    (calibrate returns before verify, so this runs on any machine)."""
    cpu_only = [e.name for e in DEFECTS if e.cpu_only]
    assert {"oob_tail_read", "uninitialised_scratch_read"} <= set(cpu_only)
    cal = calibrate("cuda", cpu_only, jobs=1)
    assert [r.outcome for r in cal.results] == [CPU_ONLY] * len(cpu_only)
    assert all(len(r.detail) > 20 for r in cal.results)  # why, from the catalog
    assert cal.ok and cal.confusion()[CPU_ONLY] == cpu_only


def test_calibrate_cli_lists_device_only_defects_without_running_them(tmp_path: Path) -> None:
    out = tmp_path / "cal.json"
    device_only = [e.name for e in DEFECTS if e.device_only]
    args = ["calibrate", "--device", "cpu", "--json", str(out)]
    for name in device_only:
        args += ["--only", name]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    assert [d["name"] for d in data["defective"]] == device_only
    for row in data["defective"]:
        assert row["verdict"] == DEVICE_ONLY and row["rejected_by"] == []
        assert row["detail"] and row["intended_gates"]
    assert data["controls"] == []
    assert data["complete"] is True and data["pending"] == []
    assert "device-only" in result.output
    for name in device_only:  # a log, not a terminal: a line as each entry finishes
        assert f"{name}: device-only (" in result.output
    bad = CliRunner().invoke(app, ["calibrate", "--only", "no_such_kernel"])
    assert bad.exit_code == 2


def test_a_calibration_cut_short_leaves_every_finished_row_in_its_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A device call killed at its limit must not lose the rows it paid for: the JSON is
    rewritten after every entry, marked incomplete with the entries still pending."""
    import kernelgate.redteam.command as command
    from kernelgate.redteam.runner import run_entry

    device_only = [e.name for e in DEFECTS if e.device_only][:3]

    def cut_after_one(device, only, *, jobs, timeout, on_result, **_):
        on_result(run_entry(entries([only[0]])[0], device))
        raise KeyboardInterrupt  # the device call's limit

    monkeypatch.setattr(command, "calibrate", cut_after_one)
    out = tmp_path / "cal.json"
    args = ["calibrate", "--device", "cpu", "--json", str(out)]
    for name in device_only:
        args += ["--only", name]
    CliRunner().invoke(app, args)
    data = json.loads(out.read_text())
    assert data["complete"] is False and data["pending"] == device_only[1:]
    assert [d["name"] for d in data["defective"]] == device_only[:1]
    assert not list(tmp_path.glob("*.partial"))


def test_entry_result_round_trips_through_its_dict() -> None:
    """What an entry's child writes is what the parent reads back: defect, control, error."""
    defect = EntryResult(
        "d",
        False,
        ["CMP-01", "AUTH-01"],
        "narrowed",
        ["CMP-01"],
        failure_reasons={"CMP-01": "off by 3 ulp"},
        skipped=["PRF-01"],
        ratios=[{"gate": "CMP-01", "status": "fail", "error_model": "order", "x": 2.5}],
        seconds=4.25,
        authored_share=0.75,
    )
    control = _result("h", [], [], control=True)
    error = EntryResult("e", False, ["ORD-02"], "error", detail="no verdict within 9 s")
    for result in (defect, control, error):
        data = json.loads(json.dumps(result.to_dict()))
        assert EntryResult.from_dict(data) == result
        assert EntryResult.from_dict(data).outcome == result.outcome
    assert EntryResult.from_dict(control.to_dict()).control
    assert not EntryResult.from_dict(defect.to_dict()).control


def _stand_in_children(
    monkeypatch: pytest.MonkeyPatch, behaviour: dict[str, str], grandchild_pid: Path
) -> None:
    """Stand a tiny Python program in for each named entry's child (no torch, no verify):
    "hang" starts a grandchild in a session of its own (as verify's sandbox workers are),
    writes its pid and sleeps; "crash" writes to stderr and exits 3; "caught" writes the row
    of a defect rejected by its first intended gate, as the real child would."""
    import sys

    import kernelgate.redteam.runner as runner

    real = runner._child_argv

    def argv(entry, device, timeout, intended_only, out):
        what = behaviour.get(entry.name)
        if what == "hang":
            code = (
                "import subprocess, sys, time\n"
                "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'],"
                " start_new_session=True)\n"
                f"open({str(grandchild_pid)!r}, 'w').write(str(p.pid))\n"
                "time.sleep(300)\n"
            )
        elif what == "crash":
            code = "import sys; print('the child fell over', file=sys.stderr); sys.exit(3)"
        elif what == "caught":
            row = EntryResult(entry.name, False, list(entry.intended), "rejected")
            row.rejected_by = list(entry.intended[:1])
            code = f"open({str(out)!r}, 'w').write({json.dumps(row.to_dict())!r})"
        else:
            return real(entry, device, timeout, intended_only, out)
        return [sys.executable, "-c", code]

    monkeypatch.setattr(runner, "_child_argv", argv)


def _gone(pid: int) -> bool:
    """Whether ``pid`` has died (reaped, or a zombie awaiting its new parent's wait)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state in ("Z", "X")


def test_an_entry_past_its_limit_is_killed_with_its_tree_and_the_rest_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child that never answers is killed at ``--entry-timeout`` with everything it
    started (a grandchild in its own session included) and gets an error row; a child that
    crashes gets one with its stderr; the other entries finish; the JSON and the exit code
    count both error rows as not caught."""
    hang, crash, caught = CPU_DEFECTS[:3]
    pid_file = tmp_path / "grandchild.pid"
    _stand_in_children(monkeypatch, {hang: "hang", crash: "crash", caught: "caught"}, pid_file)
    out = tmp_path / "cal.json"
    args = ["calibrate", "--jobs", "2", "--entry-timeout", "3", "--json", str(out)]
    for name in (hang, crash, caught):
        args += ["--only", name]
    started = time.monotonic()
    result = CliRunner().invoke(app, args)
    assert time.monotonic() - started < 60  # not the hanging child's 300 s
    assert result.exit_code == 1, result.output
    rows = {row["name"]: row for row in json.loads(out.read_text())["defective"]}
    assert rows[caught]["outcome"] == CAUGHT
    assert rows[hang]["verdict"] == "error" and rows[hang]["outcome"] == ERROR
    assert rows[hang]["detail"].startswith("no verdict within 3 s")
    assert 3 <= rows[hang]["seconds"] < 30
    assert rows[crash]["outcome"] == ERROR
    assert "exit status 3" in rows[crash]["detail"]
    assert "the child fell over" in rows[crash]["detail"]
    data = json.loads(out.read_text())
    assert data["ok"] is False and data["complete"] is True
    assert sorted(data["confusion"][ERROR]) == sorted([hang, crash])
    assert f"{hang}: {ERROR} (error" in result.output  # the log line as it finished
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while not _gone(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(grandchild), "the hanging child's grandchild outlived the entry limit"


def test_entries_in_children_give_the_in_process_outcomes() -> None:
    """Two cheap defects through real children, two at a time: each child's row comes
    back whole (outcome, rejecting gates, the child's own time)."""
    names = ["cache_by_shape", "batch_ignored"]
    cal = calibrate("cpu", names, jobs=2, intended_only=True)
    assert [r.name for r in cal.results] == names
    for r in cal.results:
        assert r.outcome == CAUGHT, (r.name, r.verdict, r.rejected_by, r.detail)
        assert set(r.rejected_by) & set(r.intended_gates) and 0 < r.seconds < cal.seconds
    assert cal.ok


CPU_DEFECTS = [e.name for e in DEFECTS if not e.device_only]


@pytest.mark.parametrize("name", CPU_DEFECTS)
def test_cpu_calibration_defect_caught_by_an_intended_gate(name: str) -> None:
    """One entry a test, so that the suite's workers share the calibration (it is most of
    the suite's time); the CPU row of docs/redteam.md is the union of these."""
    (result,) = calibrate("cpu", [name], jobs=1, intended_only=True).results
    assert result.outcome == CAUGHT, (
        f"{name}: intended {result.intended_gates}, rejected by {result.rejected_by} "
        f"(verdict {result.verdict}; {result.detail})"
    )
    (entry,) = entries([name])
    if not entry.intended_gates:  # right everywhere: CMP-01 passed, only its rule failed
        assert result.rejected_by == list(entry.intended_rules), result.failure_reasons
        assert result.authored_share is not None and result.authored_share < 0.5


CPU_CONTROLS = [e.name for e in CONTROLS if not e.device_only]


@pytest.mark.parametrize("name", CPU_CONTROLS)
def test_cpu_calibration_control_verified_through_every_gate(name: str) -> None:
    (result,) = calibrate("cpu", [name], jobs=1).results
    assert result.outcome == PASSED, (result.verdict, result.failure_reasons, result.detail)
    (entry,) = entries([name])
    if "AUTH-01" in entry.rules_in_force:  # measured and over the share, not skipped
        assert result.authored_share is not None and result.authored_share >= 0.5


def test_cpu_calibration_says_device_only_without_running() -> None:
    device_only = [e.name for e in [*DEFECTS, *CONTROLS] if e.device_only]
    started = time.monotonic()
    cal = calibrate("cpu", device_only, jobs=1)
    assert time.monotonic() - started < 5  # nothing was verified
    assert {r.name for r in cal.results if r.verdict == DEVICE_ONLY} == set(device_only)
    assert all(r.detail for r in cal.results), "device-only without a reason"


@pytest.mark.gpu
def test_gpu_device_only_defects_rejected_by_an_intended_gate() -> None:
    """On the device: the defects the interpreter cannot express (TF32, atomics, races,
    side streams, spills) are rejected by an intended gate, and the controls still pass;
    AUTH-01's red team on Kineto's device times (its authored shares are printed)."""
    names = [e.name for e in [*DEFECTS, *CONTROLS] if e.device_only] + [
        "write_write_race",  # device-only until the CPU's access trace could see it
        "matmul",
        "row_sum",
        "softmax",
        "side_stream_joined",
        "atomic_row_sum",  # the access trace's controls hold on a device too
        "scratch_two_pass",
        "fig_leaf_kernel",  # AUTH-01 on Kineto's device times (issue 21)
        "authored_with_cublas_gemm",
    ]
    cal = calibrate("cuda", names, jobs=1)
    shares = {r.name: r.authored_share for r in cal.results if r.authored_share is not None}
    print(f"\nauthored shares on the device: {shares}")
    assert shares.get("authored_with_cublas_gemm", 0.0) >= 0.5, shares
    missed = {
        r.name: (r.outcome, r.intended_gates, r.rejected_by, r.detail)
        for r in cal.defects
        if r.outcome != CAUGHT
    }
    assert not missed, missed
    rejected = {  # what failed, and why, for each control that did not pass
        r.name: (r.verdict, r.failure_reasons, r.detail)
        for r in cal.controls
        if r.outcome != PASSED
    }
    assert not rejected, rejected


def test_a_defect_only_a_rule_catches_counts_as_caught_by_it() -> None:
    """AUTH-01 named as a defect's catcher: its failure is the catch; a control judged
    with the rule in force that fails it is a rejected control."""
    fig_leaf = EntryResult("f", False, ["AUTH-01"], "rejected", ["AUTH-01"])
    honest = EntryResult("h", True, [], "rejected", ["AUTH-01"])
    assert fig_leaf.outcome == CAUGHT and honest.outcome == "rejected"
    assert not Calibration("cpu", [fig_leaf, honest]).ok
    assert Calibration("cpu", [fig_leaf]).gate_catches()["AUTH-01"]["intended"] == 1
    (entry,) = entries(["fig_leaf_kernel"])
    assert entry.intended_rules == ("AUTH-01",) and not entry.intended_gates
    assert not entry.is_control and entry.rules_in_force == ("AUTH-01",)
    (control,) = entries(["authored_with_cublas_gemm"])
    assert control.is_control and control.rules_in_force == ("AUTH-01",)
