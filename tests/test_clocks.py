"""Timing-adversarial instances (issue 17, item 4): the worker's clocks, CMP-01's fresh
instances with lying clocks and forced autotune configs, ORD-02's fresh first calls.

The clock tests install the clocks in a child process (they patch ``time`` for good), one
per mode; the gate tests run ``verify`` on the interpreter with only the gates they judge.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import kernelgate
from kernelgate.gates import base
from kernelgate.gates.base import Status
from kernelgate.gates.cmp01_values import (
    CONFIG_INSTANCES_CAP,
    autotune_coverage,
    config_indices,
)
from kernelgate.redteam.catalog import entries
from kernelgate.sandbox.clocks import (
    CEILING,
    FLOOR,
    MAX_POINTS,
    ChoicePoint,
    ClockMode,
    parse_choice_points,
    step,
)

from .conftest import DATA, ROOT

VECTOR_ADD = entries(["vector_add"])[0].reference_path


# -- the fake clock's schedule ------------------------------------------------------------
@pytest.mark.parametrize("kind", ["faster", "slower"])
def test_each_later_interval_is_strictly_shorter_or_longer_and_stays_in_range(kind: str) -> None:
    steps = [step(ClockMode(kind), k) for k in range(1, 20_001)]
    pairs = list(itertools.pairwise(steps))
    if kind == "faster":
        assert all(a > b for a, b in pairs)
    else:
        assert all(a < b for a, b in pairs)
    assert min(steps) >= FLOOR and max(steps) <= CEILING
    # where a candidate times its paths (its first reads), the interval after next is at
    # most 2/3 (at least 3/2) as long: a margin such as "only if 20% faster" goes along
    for k in range(1, 9):
        ratio = steps[k + 1] / steps[k - 1]
        assert ratio < 2 / 3 if kind == "faster" else ratio > 3 / 2, (k, ratio)
    assert steps[2] / steps[0] < 0.4 if kind == "faster" else steps[2] / steps[0] > 2.5


def test_random_clock_replays_from_its_seed_and_spreads_over_the_range() -> None:
    first = [step(ClockMode("random", 7), k) for k in range(1, 2001)]
    again = [step(ClockMode("random", 7), k) for k in range(1, 2001)]
    other = [step(ClockMode("random", 8), k) for k in range(1, 2001)]
    assert first == again and first != other
    assert min(first) >= FLOOR and max(first) <= CEILING
    assert max(first) > 100 * min(first)  # log-uniform: pairs differ by large factors
    assert 0.3 < sum(b < a for a, b in itertools.pairwise(first)) / 2000 < 0.7


def test_clock_modes_parse_and_print_back() -> None:
    for text in ("real", "faster", "slower", "random:12", "config:3"):
        assert str(ClockMode.parse(text)) == text
    assert ClockMode.parse("random:5").lies and not ClockMode.parse("config:1").lies
    for bad in ("fast", "random", "config:x", "real:1", ""):
        with pytest.raises(ValueError):
            ClockMode.parse(bad)
    with pytest.raises(ValueError):
        step(ClockMode("real"), 1)


def test_choice_points_from_a_worker_are_checked_field_by_field() -> None:
    good = {"kind": "clock", "what": "perf_counter", "where": "c.py:3", "count": 2}
    tuned = {"kind": "autotune", "what": "k", "where": "", "count": 1, "configs": 3, "chosen": 2}
    raw = [
        good,
        tuned,
        tuned | {"chosen": 3},  # out of range
        tuned | {"configs": None},
        good | {"kind": "sundial"},
        good | {"count": 0},
        good | {"count": True},
        "not a dict",
        good | {"what": "x" * 10_000, "configs": 5, "chosen": 1},
    ]
    points = parse_choice_points(raw)
    assert [p.kind for p in points] == ["clock", "autotune", "clock"]
    assert points[1].configs == 3 and points[1].chosen == 2
    assert len(points[2].what) == 200 and points[2].configs is None  # cut, and no config
    assert len(parse_choice_points([good] * (MAX_POINTS + 50))) == MAX_POINTS
    assert parse_choice_points({"kind": "clock"}) == [] and parse_choice_points(None) == []


def test_config_instances_cover_the_middle_configs_up_to_the_cap() -> None:
    assert config_indices(1) == [] and config_indices(2) == []
    assert config_indices(4) == [1, 2]  # 0 is the slower instance's, 3 the faster one's
    assert config_indices(CONFIG_INSTANCES_CAP + 2) == list(range(1, CONFIG_INSTANCES_CAP + 1))
    spread = config_indices(36)
    assert len(spread) == CONFIG_INSTANCES_CAP and spread[0] == 1 and spread[-1] == 34
    points = [
        ChoicePoint("autotune", "k", "", 1, True, 4, 0),
        ChoicePoint("autotune", "k", "", 1, True, 4, 3),
        ChoicePoint("clock", "time", "", 1),
    ]
    assert autotune_coverage(points) == {
        "k": {"configs": 4, "exercised": [0, 3], "not_exercised": [1, 2]}
    }


# -- the clocks installed in a process ----------------------------------------------------
CANDIDATE = """
import time, timeit
import libclock

def reads(n):
    return [time.perf_counter() for _ in range(n)]

def ns_reads(n):
    return [time.monotonic_ns() for _ in range(n)]

def until(seconds):
    started, spins = time.time(), 0
    while time.time() - started < seconds:
        spins += 1
    return spins

def through_timeit():
    return timeit.Timer(lambda: None).timeit(number=1)

def through_library():
    return libclock.now()
"""

LIBRARY = """
import time
from kernelgate.sandbox import clocks

def now():
    return time.perf_counter(), clocks._real_perf_counter()
"""

DRIVER = """
import importlib.util, json, os, sys
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "lib"))
from kernelgate.sandbox.clocks import ClockMode, Clocks
path = os.path.join(os.path.dirname(__file__), "cand", "candidate.py")
clocks = Clocks(ClockMode.parse(sys.argv[1]), path, "kernelgate_candidate", device_timing=False)
clocks.install()
spec = importlib.util.spec_from_file_location("kernelgate_candidate", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
out = {
    "reads": module.reads(8),
    "ns": module.ns_reads(5),
    "spins": module.until(0.1),
    "timeit": module.through_timeit(),
    "library": module.through_library(),
}
out["again"] = module.reads(3)
out["report"] = clocks.report()
print(json.dumps(out))
"""


def _child(tmp_path: Path, driver: str, files: dict[str, str], *args: str) -> dict:
    for name, text in {"driver.py": driver, **files}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))  # TRITON_INTERPRET as conftest set it
    done = subprocess.run(
        [sys.executable, str(tmp_path / "driver.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mode", ["real", "faster", "slower", "random:11"])
def test_candidate_reads_lie_by_the_mode_and_library_reads_keep_real_time(
    tmp_path: Path, mode: str
) -> None:
    out = _child(
        tmp_path,
        DRIVER,
        {"cand/candidate.py": CANDIDATE, "lib/libclock.py": LIBRARY},
        mode,
    )
    reads, ns = out["reads"], out["ns"]
    intervals = [b - a for a, b in itertools.pairwise(reads)]
    assert all(i > 0 for i in intervals) and all(b > a for a, b in itertools.pairwise(ns))
    assert all(b > a for a, b in itertools.pairwise(reads[-1:] + out["again"]))
    assert out["spins"] >= 1  # a loop until 0.1 s have passed ends
    if mode == "faster":
        assert all(b < a for a, b in itertools.pairwise(intervals))
    if mode == "slower":
        assert all(b > a for a, b in itertools.pairwise(intervals))
    if mode != "real":
        assert min(intervals) >= FLOOR / 1e18 * 0.999  # the fake pace: at least 10 us a read
        assert out["timeit"] >= FLOOR / 1e18 * 0.999  # timeit called by the candidate lies too
    # a library module (not in the candidate's folder) reading the clock gets real time
    seen, real = out["library"]
    assert abs(seen - real) < 0.01
    points = {(p["what"], p["where"].rsplit("/", 1)[-1]): p for p in out["report"]["choice_points"]}
    assert points[("perf_counter", "candidate.py:6")]["count"] == 11  # reads(8), reads(3)
    assert points[("monotonic_ns", "candidate.py:9")]["count"] == 5
    assert ("perf_counter", "candidate.py:18") in points  # through timeit
    assert not any(where.startswith("libclock") for _, where in points)
    assert all(p["faked"] is (mode != "real") for p in points.values())
    assert out["report"]["mode"] == mode


def test_random_clock_replays_in_a_new_process(tmp_path: Path) -> None:
    files = {"cand/candidate.py": CANDIDATE, "lib/libclock.py": LIBRARY}
    first = _child(tmp_path, DRIVER, files, "random:11")
    again = _child(tmp_path, DRIVER, files, "random:11")

    def intervals(reads: list[float]) -> list[float]:
        return [round(b - a, 9) for a, b in itertools.pairwise(reads)]

    assert intervals(first["reads"]) == intervals(again["reads"])


TUNED = """
import torch, triton, triton.language as tl

@triton.autotune(
    configs=[triton.Config({"BLOCK": b}) for b in (16, 32, 64, 128)], key=["n"]
)
@triton.jit
def _fill(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offs, tl.zeros((BLOCK,), tl.float32) + BLOCK, mask=offs < n)

def block(n):
    out = torch.empty(n)
    _fill[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](out, n)
    return int(out[0].item())

def bench():
    import triton.testing
    return triton.testing.do_bench(lambda: block(40), quantiles=[0.5, 0.2])
"""

TUNED_DRIVER = """
import importlib.util, json, os, sys
from kernelgate.sandbox.clocks import ClockMode, Clocks
import triton
path = os.path.join(os.path.dirname(__file__), "cand", "tuned.py")
clocks = Clocks(ClockMode.parse(sys.argv[1]), path, "kernelgate_candidate", device_timing=False)
clocks.install()
spec = importlib.util.spec_from_file_location("kernelgate_candidate", path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
blocks = [module.block(100), module.block(100), module.block(7)]
print(json.dumps({"blocks": blocks, "bench": module.bench(), "report": clocks.report()}))
"""


@pytest.mark.parametrize(
    "mode, chosen",
    [("real", 0), ("faster", 3), ("slower", 0), ("config:2", 2), ("config:5", 1)],
)
def test_autotune_config_is_forced_under_the_interpreter(
    tmp_path: Path, mode: str, chosen: int
) -> None:
    out = _child(tmp_path, TUNED_DRIVER, {"cand/tuned.py": TUNED}, mode)
    block = (16, 32, 64, 128)[chosen]
    assert out["blocks"] == [block, block, block]  # a new key (n=7) tunes again, alike
    tunings = [p for p in out["report"]["choice_points"] if p["kind"] == "autotune"]
    assert {(p["what"], p["configs"], p["chosen"]) for p in tunings} == {("_fill", 4, chosen)}
    assert sum(p["count"] for p in tunings) == 3  # keys n=100, n=7 and do_bench's n=40
    assert all(p["where"].endswith("tuned.py:14") for p in tunings)
    bench = [p for p in out["report"]["choice_points"] if p["kind"] == "do_bench"]
    assert len(bench) == 1 and bench[0]["where"].endswith("tuned.py:19")
    assert len(out["bench"]) == 2 and out["bench"][0] > 0  # a list for quantiles


def test_random_autotune_choice_replays(tmp_path: Path) -> None:
    files = {"cand/tuned.py": TUNED}
    first = _child(tmp_path, TUNED_DRIVER, files, "random:3")
    again = _child(tmp_path, TUNED_DRIVER, files, "random:3")
    assert first["blocks"] == again["blocks"]
    assert first["report"]["choice_points"] == again["report"]["choice_points"]


# -- the gates ----------------------------------------------------------------------------
def test_no_choice_point_no_fresh_instance() -> None:
    control = entries(["vector_add"])[0]
    verdict = kernelgate.verify(control.reference_path, control.candidate_path, only=["CMP-01"])
    cmp01 = verdict.gate("CMP-01")
    assert cmp01.status is Status.PASS
    assert cmp01.evidence["choice_points"] == [] and cmp01.evidence["timing_instances"] == []
    assert "no timing-dependent choice" in cmp01.evidence["timing_note"]


def test_a_path_chosen_by_the_clock_is_judged_in_a_lying_instance() -> None:
    verdict = kernelgate.verify(VECTOR_ADD, DATA / "clk_timed_margin.py", only=["CMP-01"])
    cmp01 = verdict.gate("CMP-01")
    assert cmp01.status is Status.FAIL
    assert "fresh instance whose clocks run faster" in cmp01.reason
    assert "clk_timed_margin.py:33" in cmp01.reason  # the choice point, by file:line
    evidence = cmp01.evidence
    assert evidence["per_distribution"]["normal"]["worst_error_over_bound"] < 1  # main: exact
    lines = {p["where"].rsplit(":", 1)[-1] for p in evidence["choice_points"]}
    assert lines == {"33", "35", "36", "38"}
    assert [i["mode"] for i in evidence["timing_instances"]] == ["faster"]
    assert evidence["timing_instances"][0]["failed"] == "distribution=normal"


def test_a_candidate_that_breaks_under_a_lying_clock_is_an_incident() -> None:
    verdict = kernelgate.verify(VECTOR_ADD, DATA / "clk_timeout.py", only=["CMP-01"])
    assert verdict.gate("CMP-01").status is Status.SKIPPED
    res01 = verdict.gate("RES-01")
    assert res01.status is Status.FAIL and "TimeoutError" in res01.reason
    assert "fresh instance (clock mode faster)" in json.dumps(res01.evidence)


def test_timed_block_size_control_is_verified_in_every_clock_mode() -> None:
    control = entries(["timed_block_size"])[0]
    verdict = kernelgate.verify(
        control.reference_path, control.candidate_path, only=["CMP-01", "ORD-02"]
    )
    cmp01, ord02 = verdict.gate("CMP-01"), verdict.gate("ORD-02")
    assert cmp01.status is Status.PASS and ord02.status is Status.PASS, (cmp01, ord02)
    modes = [i["mode"] for i in cmp01.evidence["timing_instances"]]
    assert modes[:2] == ["faster", "slower"] and modes[2].startswith("random:")
    assert len(modes) == 3  # no autotuner: no config instance
    assert len(ord02.evidence["fresh_instances"]) == 2


def test_every_autotune_config_is_judged_and_the_wrong_one_rejected() -> None:
    defect = entries(["autotune_bad_config"])[0]
    verdict = kernelgate.verify(
        defect.reference_path, defect.candidate_path, only=["CMP-01"], seed=1
    )
    cmp01 = verdict.gate("CMP-01")
    assert cmp01.status is Status.FAIL
    assert "config 1 of 3" in cmp01.reason  # the middle config, whichever instance took it
    tuned = [
        p["chosen"]
        for i in cmp01.evidence["timing_instances"]
        for p in i["choice_points"]
        if p["kind"] == "autotune"
    ]
    assert tuned[-1] == 1 and set(tuned[:-1]) <= {0, 2}


def test_first_call_state_is_caught_by_a_fresh_instance() -> None:
    defect = entries(["first_call_differs"])[0]
    verdict = kernelgate.verify(
        defect.reference_path, defect.candidate_path, only=["CMP-01", "ORD-02"]
    )
    assert verdict.gate("CMP-01").status is Status.PASS  # both paths are accurate
    ord02 = verdict.gate("ORD-02")
    assert ord02.status is Status.FAIL
    # the main instance's own first call (CMP-01's first case, input A of ORD-02) already
    # differs from its later answers to the same input
    assert "main instance's first call" in ord02.reason, ord02.reason
    finding = ord02.counterexample.findings[0]
    assert finding["main_instance"] != finding["main_instance_first_call"]
    instances = [i["instance"] for i in ord02.evidence["fresh_instances"]]
    assert instances == ["main_instance"]  # caught before a new worker was needed


def test_first_call_state_is_caught_by_new_workers_when_no_first_call_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where the main instance's first call is not kept (too large to hold, here: nothing
    is), two new workers judge the first call of input A."""
    monkeypatch.setattr(base, "FIRST_CALL_KEPT_BYTES", 0)
    defect = entries(["first_call_differs"])[0]
    verdict = kernelgate.verify(
        defect.reference_path, defect.candidate_path, only=["CMP-01", "ORD-02"]
    )
    ord02 = verdict.gate("ORD-02")
    assert ord02.status is Status.FAIL
    assert "fresh instance's first call" in ord02.reason, ord02.reason
    finding = ord02.counterexample.findings[0]
    assert finding["main_instance"] != finding["fresh_instance_1"]
    assert [i["instance"] for i in ord02.evidence["fresh_instances"]] == ["fresh_instance_1"]


@pytest.mark.gpu
def test_device_benchmarks_lie_and_record_on_a_gpu(tmp_path: Path) -> None:
    """Event.elapsed_time and a real do_bench on a device; autotune timed by Triton (real)
    and forced (faster)."""
    driver = """
    import importlib.util, json, os, sys
    from kernelgate.sandbox.clocks import ClockMode, Clocks
    import torch, triton
    path = os.path.join(os.path.dirname(__file__), "cand", "tuned.py")
    mode = ClockMode.parse(sys.argv[1])
    clocks = Clocks(mode, path, "kernelgate_candidate", device_timing=True)
    clocks.install()
    spec = importlib.util.spec_from_file_location("kernelgate_candidate", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    def timed():
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); torch.ones(1 << 20, device="cuda").sum(); end.record()
        end.synchronize()
        return start.elapsed_time(end)
    events = [timed() for _ in range(4)]
    print(json.dumps({"events": events, "bench": module.bench(), "report": clocks.report()}))
    """
    tuned = TUNED.replace("torch.empty(n)", "torch.empty(n, device='cuda')")
    env_files = {"cand/tuned.py": tuned}
    for mode in ("real", "faster"):
        out = _child(tmp_path, driver, env_files, mode)
        kinds = {p["kind"] for p in out["report"]["choice_points"]}
        assert {"autotune", "do_bench"} <= kinds
        tuned_points = [p for p in out["report"]["choice_points"] if p["kind"] == "autotune"]
        if mode == "faster":
            events = out["events"]
            assert all(b < a for a, b in itertools.pairwise(events))
            assert {p["chosen"] for p in tuned_points} == {3}
        else:
            assert all(p["faked"] is False for p in tuned_points)
    assert torch.cuda.is_available()
