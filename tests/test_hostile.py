"""The hostile-candidate suite (``kernelgate.redteam.hostile``, ``calibrate --hostile``).

Three kinds of test: the catalog and the safety rules (no judge, milliseconds); the runner's
checks failing when an attack gets through (a judged candidate plus a played attack, and a
real attack that gets through without confinement, through the CLI); and the whole suite
held off, which needs the worker's confinement (issue 18, i18-confine) and is an expected
failure until that is merged.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelgate.cli import app
from kernelgate.redteam.hostile import kit
from kernelgate.redteam.hostile.catalog import ATTACKS, CHECKS, attacks
from kernelgate.redteam.hostile.runner import (
    BREACHED,
    HELD,
    LATER_JUDGE,
    SKIPPED,
    ArenaFiles,
    AttackResult,
    HostileSuite,
    build_arena,
    render,
    run_attack,
    run_suite,
)


def _names(path: Path) -> set[str]:
    return {
        node.name
        for node in ast.parse(path.read_text()).body
        if isinstance(node, ast.ClassDef | ast.FunctionDef)
    }


def test_catalog_is_well_formed() -> None:
    names = [a.name for a in ATTACKS]
    assert len(names) >= 15 and len(names) == len(set(names))
    assert len({a.kind for a in ATTACKS}) >= 12, "the attack classes of issue 18"
    for attack in ATTACKS:
        assert len(attack.tries) > 30 and attack.defence, attack.name
        assert attack.targets and set(attack.targets) <= set(CHECKS), attack.name
        source = attack.template_path.read_text()
        assert source.count(f'"{kit.PLACEHOLDER}"') == 1, attack.name
        assert "ModelNew" in _names(attack.template_path), attack.name
        assert {"Model", "get_inputs"} <= _names(attack.reference_path), attack.name
        if attack.device_only:
            assert len(attack.device_only) > 20 and attack.cpu_analogue, attack.name
    with pytest.raises(KeyError, match="no_such_attack"):
        attacks(["no_such_attack"])


def test_a_template_judged_as_it_is_fails_with_a_clear_error() -> None:
    with pytest.raises(RuntimeError, match="template"):
        kit.Arena.rendered(kit.PLACEHOLDER)


def test_rendering_fills_the_arena_in() -> None:
    attack = attacks(["kill_parent_at_import"])[0]
    files = build_arena(attack, "cpu")
    try:
        render(attack, files, 4242, (1111, 2222))
        text = files.candidate.read_text()
        assert kit.PLACEHOLDER not in text
        tree = ast.parse(text)
        call = next(
            node.value
            for node in tree.body
            if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "ARENA"
        )
        arena = kit.Arena.rendered(ast.literal_eval(call.args[0]))
        assert (arena.judge_pid, arena.tcp_port, arena.udp_port) == (4242, 1111, 2222)
        assert Path(arena.reference).read_text() == attack.reference_path.read_text()
        assert arena.root == str(files.root) and Path(arena.source_canary).is_relative_to(
            files.root
        )
    finally:
        import shutil

        shutil.rmtree(files.root)


def _plant_file(path: Path) -> None:
    path.parent.mkdir(parents=True)
    path.write_text("kgh\n")


def _load_later_judge(tmp_path: Path, plant: str | None) -> object:
    """The honest later-judge candidate rendered for a fresh arena (with ``plant`` left in
    its HOME) and imported here: it is our own code, the judge's view needs no worker."""
    import importlib.util
    import shutil

    attack = attacks(["process_state_for_later_judges"])[0]
    files = build_arena(attack, "cpu")
    try:
        if plant and plant.endswith("/"):  # a folder, empty
            (Path(files.arena.home) / plant).mkdir(parents=True)
        elif plant:  # a file, with a line in it
            _plant_file(Path(files.arena.home) / plant)
        files.candidate = tmp_path / f"later_{len(list(tmp_path.iterdir()))}.py"
        render(attack, files, 4242, (1111, 2222), LATER_JUDGE)
        spec = importlib.util.spec_from_file_location(files.candidate.stem, files.candidate)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        shutil.rmtree(files.root)


def test_the_later_judge_fails_on_inherited_state_and_passes_on_a_clean_start(
    tmp_path: Path,
) -> None:
    import torch

    clean = _load_later_judge(tmp_path, None)
    a, b = torch.randn(8), torch.randn(8)
    assert torch.equal(clean.ModelNew()(a, b), a + b)
    # the CUDA driver's own empty folder (made when the judge starts CUDA) is no poison
    empty = _load_later_judge(tmp_path, ".nv/ComputeCache/")
    assert torch.equal(empty.ModelNew()(a, b), a + b)
    with pytest.raises(RuntimeError, match="ComputeCache holds index"):
        _load_later_judge(tmp_path, ".nv/ComputeCache/index")
    before = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True  # as an earlier candidate in this process would
    try:
        with pytest.raises(RuntimeError, match=r"cudnn\.benchmark=True"):
            _load_later_judge(tmp_path, None)
    finally:
        torch.backends.cudnn.benchmark = before


def test_attacks_may_signal_only_the_runners_descendants() -> None:
    arena = build_arena(ATTACKS[0], "cpu").arena
    try:
        assert not kit.may_signal(arena, 1)[0]
        assert not kit.may_signal(arena, os.getpid())[0], "never the runner"
        assert not kit.may_signal(arena, os.getppid())[0], "never the runner's parent"
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
        try:
            assert kit.may_signal(arena, child.pid)[0], "the runner's own child (a judge)"
        finally:
            child.kill()
            child.wait()
        assert kit.may_signal(arena, 4_000_000)[0], "a pid nobody here can see"
        assert not kit.may_signal(arena, 0)[0], "no parent visible: nothing to signal"
        # kill(-1) only from a PID namespace other than the runner's, never on a guess
        assert not kit.own_pid_namespace(arena), "the test runs in the runner's namespace"
        unknown = dataclasses.replace(arena, runner_pidns="")
        assert not kit.own_pid_namespace(unknown)
    finally:
        import shutil

        shutil.rmtree(arena.root)


def _play_a_successful_attack(files: ArenaFiles) -> None:
    """What a breakout would leave behind: an edited canary, rewritten evidence, a helper."""
    with open(files.arena.source_canary, "a") as source:
        source.write("\n# tampered\n")
    evidence = Path(files.arena.evidence)
    data = json.loads(evidence.read_text())
    evidence.write_text(json.dumps(data | {"verdict": "verified"}))
    helper = subprocess.Popen(
        ["sleep", "30"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), kit.MARKER_ENV: files.arena.token},
        start_new_session=True,
    )
    _HELPERS.append(helper)


_HELPERS: list[subprocess.Popen[bytes]] = []


def test_the_checks_fail_when_an_attack_gets_through() -> None:
    """A candidate that is held off by design, then the runner is shown a breakout: every
    check it touches must fail, and the runner must end the marked helper."""
    attack = attacks(["monkeypatch_comparisons"])[0]
    result = run_attack(attack, "cpu", delay=1.0, after_judge=_play_a_successful_attack)
    assert result.verdict == "rejected" and result.judge_exit == 1
    assert result.outcome == BREACHED
    assert {"canary-changed", "evidence-rewritten", "verdict-flip", "outlived"} <= set(
        result.failed_checks
    ), result.findings
    assert any("kernelgate source" in f for f in result.findings)
    helper = _HELPERS.pop()
    assert helper.wait(timeout=10) == -9, "the runner kills what carries the marker"


def _result(name: str, outcome: str, findings: list[str] | None = None) -> AttackResult:
    attack = attacks([name])[0]
    return AttackResult(
        name,
        attack.kind,
        attack.tries,
        list(attack.targets),
        outcome,
        findings=findings or [],
        stopped_by="not stopped" if findings else "isolation: pid-namespace",
        isolation="" if findings else "pid-namespace",
    )


@pytest.mark.parametrize("breached", [False, True])
def test_calibrate_hostile_prints_writes_and_exits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, breached: bool
) -> None:
    """The command's table, JSON and exit status, over a suite given to it."""
    import kernelgate.redteam.hostile.runner as runner

    results = [_result("kill_parent_at_import", HELD)]
    if breached:
        results.append(
            _result("edit_kernelgate_source", BREACHED, ["canary-changed: kernelgate source"])
        )
    asked: list[list[str] | None] = []

    def fake_suite(device: str, only: list[str] | None, **kwargs: object) -> HostileSuite:
        asked.append(only)
        return HostileSuite(device, results, 1.0)

    monkeypatch.setattr(runner, "run_suite", fake_suite)
    out = tmp_path / "hostile.json"
    names = [r.name for r in results]
    argv = ["calibrate", "--hostile", "--json", str(out)]
    for name in names:
        argv += ["--only", name]
    cli = CliRunner().invoke(app, argv)
    assert asked == [names]
    assert cli.exit_code == (1 if breached else 0), cli.output
    report = json.loads(out.read_text())
    assert report["schema"] == "kernelgate.hostile/1" and report["ok"] is not breached
    assert [a["name"] for a in report["attacks"]] == names
    assert "what stopped it" in cli.output and "kill_parent_at_import" in cli.output
    if breached:
        assert report["attacks"][1]["failed_checks"] == ["canary-changed"]
        assert "not held off" in cli.output and "canary-changed" in cli.output


def test_calibrate_hostile_names_an_unknown_attack() -> None:
    result = CliRunner().invoke(app, ["calibrate", "--hostile", "--only", "no_such_attack"])
    assert result.exit_code == 2
    assert "no_such_attack" in result.output


@pytest.fixture(scope="module")
def whole_suite() -> HostileSuite:
    """Every attack, once, four at a time (about two minutes on two busy cores)."""
    return run_suite("cpu", jobs=4, delay=3.0)


def test_every_breach_is_reported_under_what_the_attack_aimed_at(
    whole_suite: HostileSuite,
) -> None:
    """Whatever confinement is in force: each attack ran (or says why not), each breach is
    named by a check the attack declares, the judge answered every time it was not killed,
    and a canary edit, where it got through, is reported as one."""
    assert [r.name for r in whole_suite.results] == [a.name for a in ATTACKS]
    for result, attack in zip(whole_suite.results, ATTACKS, strict=True):
        assert "runner-error" not in result.failed_checks, result.findings
        if result.outcome == SKIPPED:
            assert result.detail, result.name
            continue
        assert result.judge_exit is not None, result.name
        if result.outcome == BREACHED:
            assert set(result.failed_checks) & set(attack.targets), (result.name, result.findings)
            assert result.stopped_by == "not stopped"
        else:
            assert result.stopped_by and result.stopped_by != "not stopped", result.name
    source = next(r for r in whole_suite.results if r.name == "edit_kernelgate_source")
    if source.outcome == BREACHED:
        assert source.failed_checks == ["canary-changed"], source.findings
    else:
        assert source.isolation, "held off must come from confinement it names"


# What the suite needs to hold every attack off; a machine without them skips, and says so.
NEEDED_CONFINEMENT = ("pid-namespace", "no-network", "readonly-root")


def test_every_attack_is_held_off(whole_suite: HostileSuite) -> None:
    """0 verdict flips, no judge crash, nothing outlives a verification, canaries intact:
    wherever the judge could confine the worker (issue 18's acceptance, CPU row)."""
    for result in whole_suite.results:
        in_force = result.isolation.split(";")[0].split(", ") if result.isolation else []
        lacking = [m for m in NEEDED_CONFINEMENT if m not in in_force]
        if result.isolation and lacking:
            pytest.skip(f"this machine cannot confine the worker ({', '.join(lacking)} missing)")
    assert all(r.outcome in (HELD, SKIPPED) for r in whole_suite.results), [
        (r.name, r.findings) for r in whole_suite.breached
    ]
    assert whole_suite.ok
