"""FORBID-01's dynamic half (sandbox/forbidden_watch.py): forbidden names built at run time,
which the static half cannot resolve, caught while candidate code runs, with the call site;
an allowed candidate clean; the judge keeping only bounded, checked data; the cost small.

Most cases watch a candidate in this process (the watch is plain Python, and ``uninstall``
takes its import hooks out again); two go through a real worker, and one through
``verify``, so that the uses reach the verdict's FORBID-01 entry.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import torch

from kernelgate.gates.base import Status
from kernelgate.sandbox.forbidden_watch import (
    MAX_USES,
    TAMPERED,
    ForbiddenWatch,
    aten_targets,
    call_names,
    merge_uses,
    parse_uses,
)
from kernelgate.static import StaticPolicy, analyse, rule_results, with_dynamic_uses
from kernelgate.verdict import Outcome

DATA = Path(__file__).parent / "data" / "forbid"
REFERENCE = Path(__file__).parent.parent / "examples" / "topk" / "reference.py"
TOPK = ("torch.topk",)
EVADERS = ["getattr_topk.py", "aten_unwatched.py", "import_at_call.py"]


@pytest.fixture
def watched() -> Iterator[list[ForbiddenWatch]]:
    """Watches made by a test, uninstalled (and their modules forgotten) after it."""
    made: list[ForbiddenWatch] = []
    yield made
    for watch in made:
        watch.uninstall()
    for name in [n for n in sys.modules if n.startswith("forbid_case_")]:
        del sys.modules[name]


def load(
    made: list[ForbiddenWatch], name: str, forbidden: tuple[str, ...]
) -> tuple[ForbiddenWatch, ModuleType]:
    """Watch the candidate ``name`` of tests/data/forbid as the worker does: hooks in
    before its import, its import and ``ModelNew(8)`` watched as the load."""
    path = DATA / name
    module_name = f"forbid_case_{path.stem}"
    watch = ForbiddenWatch(forbidden, str(path), module_name)
    watch.install()
    made.append(watch)
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    with watch.watching("load"):
        spec.loader.exec_module(module)
    return watch, module


def rows() -> torch.Tensor:
    return torch.randint(0, 32, (14, 100)).float()


@pytest.mark.parametrize("name", EVADERS)
def test_static_half_misses_what_is_built_at_run_time(name: str) -> None:
    findings = analyse(DATA / name, StaticPolicy(forbidden=(*TOPK, "colorsys")))
    assert [f for f in findings if f.rule == "FORBID-01"] == []


def test_name_built_at_run_time_caught_at_its_call_site(watched: list[ForbiddenWatch]) -> None:
    watch, module = load(watched, "getattr_topk.py", TOPK)
    model = module.ModelNew(8)
    with watch.watching("call"):
        model(rows())
    uses = watch.drain()["uses"]
    vias = {u["via"] for u in uses}
    assert vias == {"torch call", "aten op (dispatch)"}
    assert {u["where"] for u in uses} == {"getattr_topk.py:15"}  # the call, not the getattr
    assert all(u["entry"] == "torch.topk" and u["phase"] == "call" for u in uses)
    assert watch.drain()["uses"] == []  # drained: the next reply starts afresh


def test_aten_op_with_torch_functions_off_caught_by_dispatch(
    watched: list[ForbiddenWatch],
) -> None:
    watch, module = load(watched, "aten_unwatched.py", TOPK)
    with watch.watching("call"):
        module.ModelNew(8)(rows())
    uses = watch.drain()["uses"]
    assert [(u["via"], u["name"], u["where"]) for u in uses] == [
        ("aten op (dispatch)", "aten.topk.default", "aten_unwatched.py:16")
    ]


def test_module_imported_by_built_name_caught(watched: list[ForbiddenWatch]) -> None:
    sys.modules.pop("colorsys", None)  # a first load and an import statement: both seen
    watch, module = load(watched, "import_at_call.py", (*TOPK, "colorsys"))
    with watch.watching("call"):
        module.ModelNew(8)(rows())
    uses = watch.drain()["uses"]
    assert {u["entry"] for u in uses} == {"colorsys"}
    assert {u["where"] for u in uses} == {"import_at_call.py:14"}
    assert {"import", "import (first load)"} <= {u["via"] for u in uses}


def test_allowed_candidate_records_nothing(watched: list[ForbiddenWatch]) -> None:
    watch, module = load(watched, "sorted_allowed.py", TOPK)
    model = module.ModelNew(8)
    x = rows()
    with watch.watching("call"):
        values, _ = model(x)
    assert torch.equal(values, torch.topk(x, 8).values)
    assert watch.drain() == {"uses": [], "dropped": 0}


def test_outside_the_windows_nothing_is_recorded(watched: list[ForbiddenWatch]) -> None:
    watch, module = load(watched, "getattr_topk.py", TOPK)
    module.ModelNew(8)(rows())  # the worker's own time: not watched
    assert watch.drain()["uses"] == []


def test_removed_watch_is_itself_reported(watched: list[ForbiddenWatch]) -> None:
    watch, _ = load(watched, "sorted_allowed.py", TOPK)
    with watch.watching("call"):
        # candidate code that pops the torch-function mode off the stack
        torch.overrides._pop_mode()
    uses = watch.drain()["uses"]
    assert [u["entry"] for u in uses] == [TAMPERED]
    assert torch.overrides._get_current_function_mode_stack() == []


def test_names_a_call_answers_to() -> None:
    assert call_names(torch.Tensor.topk) == ["torch.Tensor.topk", "torch.topk"]
    assert "torch.matmul" in call_names(torch.Tensor.__matmul__)
    assert "torch.cdist" in call_names(torch.cdist)  # defined in torch.functional
    assert aten_targets(("torch.topk", "torch.Tensor.sort", "fla.ops.kda")) == {
        "topk": "torch.topk",
        "sort": "torch.Tensor.sort",
    }


def test_judge_keeps_only_checked_bounded_uses() -> None:
    good = {"entry": "torch.topk", "name": "torch.topk", "via": "torch call", "where": "a.py:3"}
    good |= {"phase": "call", "count": 2}
    node = {"uses": [good, {"entry": 7}, "junk", good | {"where": "x" * 5000}], "dropped": 0}
    uses = parse_uses(node)
    assert len(uses) == 2 and len(uses[1]["where"]) <= 300
    assert parse_uses(["not", "a", "dict"]) == [] and parse_uses(None) == []
    kept: list[dict] = []
    merge_uses(kept, uses)
    merge_uses(kept, uses)
    assert kept[0]["count"] == 4  # the same use from two replies: counted, not repeated
    many = [good | {"where": f"a.py:{i}"} for i in range(3 * MAX_USES)]
    merge_uses(kept, many)
    assert len(kept) == MAX_USES


def test_dynamic_uses_fail_forbid_01_beside_static_findings() -> None:
    use = {"entry": "torch.topk", "name": "aten.topk.default", "via": "aten op (dispatch)"}
    use |= {"where": "c.py:9", "phase": "call", "count": 1}
    passing = rule_results([], TOPK)
    assert passing[0].status is Status.PASS
    failed = with_dynamic_uses(passing, [use])
    assert failed[0].status is Status.FAIL
    assert failed[0].where == ["c.py:9 (aten op (dispatch) `aten.topk.default`, call)"]
    static = rule_results(
        analyse(
            DATA.parent.parent / "static_cases" / "defect_forbidden.py",
            StaticPolicy(forbidden=TOPK),
        ),
        TOPK,
    )
    both = with_dynamic_uses(static, [use])
    assert both[0].where == [*static[0].where, failed[0].where[0]]  # static sites first
    assert static[0].where and both[0].message.startswith(static[0].message)
    skipped = rule_results([], ())  # nothing forbidden: the rule is not in force
    assert with_dynamic_uses(skipped, [use])[0].status is Status.SKIPPED


def test_watch_cost_per_torch_call_is_small(watched: list[ForbiddenWatch]) -> None:
    watch, module = load(watched, "sorted_allowed.py", TOPK)
    model, x = module.ModelNew(8), rows()

    def seconds(watching: bool, calls: int = 300) -> float:
        best = float("inf")
        for _ in range(3):
            started = time.perf_counter()
            for _ in range(calls):
                if watching:
                    with watch.watching("call"):
                        model(x)
                else:
                    model(x)
            best = min(best, time.perf_counter() - started)
        return best / calls

    seconds(True, 10)  # warm caches
    extra = seconds(True) - seconds(False)
    # a forward of a few torch calls (sort, two slices, two contiguous) plus the window's
    # sys.modules check: well under a millisecond more (about 0.1 ms measured here)
    assert extra < 1e-3, f"the watch added {extra * 1e6:.0f} us per call"


def test_worker_reports_uses_and_an_allowed_candidate_none() -> None:
    from kernelgate.sandbox.session import WorkerSession

    found = {}
    for name in ("getattr_topk.py", "sorted_allowed.py"):
        session = WorkerSession(DATA / name, [8], forbidden=TOPK)
        with session:
            session.call([rows()], poison=0x7F, guard_bytes=64)
            session.call([rows()], poison=0x7F, guard_bytes=64)
        found[name] = session.forbidden_uses
    assert {(u["via"], u["where"], u["count"]) for u in found["getattr_topk.py"]} == {
        ("torch call", "getattr_topk.py:15", 2),
        ("aten op (dispatch)", "getattr_topk.py:15", 2),
    }
    assert found["sorted_allowed.py"] == []


def test_verify_rejects_a_use_only_the_dynamic_half_sees() -> None:
    from kernelgate.pipeline import verify

    verdict = verify(REFERENCE, DATA / "aten_unwatched.py", only=["CMP-01"], forbid=TOPK)
    assert verdict.verdict is Outcome.REJECTED
    assert verdict.failed_rules == ["FORBID-01"] and verdict.failed_gates == []
    entry = verdict.rules[0]
    assert entry.where and all(w.startswith("aten_unwatched.py:16 ") for w in entry.where)
