"""Derived dims (issue 17, item 1): ranges and divisibility found by probing the reference,
sizes that shape only parameters, and CMP-03 spreading its shapes over every varying dim."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
from pathlib import Path

import pytest
import torch

import kernelgate
from kernelgate.contract.derive import (
    FAILED,
    NOT_PROBED,
    PASSED,
    Prober,
    derive_contract,
    fit_range,
)
from kernelgate.contract.load import load_contract
from kernelgate.contract.spec import CONTRACT_SCHEMA, Contract, Dim, OutputSpec, TensorSpec
from kernelgate.contract.spec import Postcondition as _Post
from kernelgate.errors import ContractError
from kernelgate.formats.kernelbench import load_reference
from kernelgate.gates.base import Status
from kernelgate.inputs import footprint
from kernelgate.inputs.shapes import MAX_CASES, MAX_CASES_WIDE, case_budget, choose

from .conftest import DATA

REDTEAM = Path(kernelgate.__file__).parent / "redteam"

BATCHNORM = """
import torch
batch_size = 8
features = 6

class Model(torch.nn.Module):
    def __init__(self, features):
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(features)  # training mode: batch statistics

    def forward(self, x):
        return self.norm(x)

def get_inputs():
    return [torch.randn(batch_size, features)]

def get_init_inputs():
    return [features]
"""

GROUPED = """
import torch
batch_size = 2
channels = 24
groups = 4
side = 5

class Model(torch.nn.Module):
    def __init__(self, channels, groups):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, channels, 3, padding=1, groups=groups)

    def forward(self, x):
        return self.conv(x)

def get_inputs():
    return [torch.randn(batch_size, channels, side, side)]

def get_init_inputs():
    return [channels, groups]
"""

MLP = """
import torch
batch_size = 4
in_features = 8
hidden = 32
out_features = 6

class Model(torch.nn.Module):
    def __init__(self, in_features, hidden, out_features):
        super().__init__()
        self.fc1 = torch.nn.Linear(in_features, hidden)
        self.fc2 = torch.nn.Linear(hidden, out_features)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))

def get_inputs():
    return [torch.randn(batch_size, in_features)]

def get_init_inputs():
    return [in_features, hidden, out_features]
"""

# ``.item()`` cannot run on the meta device, so every probe runs on the CPU, where the
# input element limit applies: doubling ``rows`` is too large to try.
CPU_ONLY = """
import torch
rows = 64
cols = 16

class Model(torch.nn.Module):
    def forward(self, x):
        return x * x.abs().max().item()

def get_inputs():
    return [torch.randn(rows, cols)]

def get_init_inputs():
    return []
"""

SLOW = """
import time
import torch
n = 8

class Model(torch.nn.Module):
    def forward(self, x):
        time.sleep(0.4)
        return x + 1

def get_inputs():
    return [torch.randn(n)]

def get_init_inputs():
    return []
"""


def _derive(tmp_path: Path, source: str) -> dict[str, Dim]:
    path = tmp_path / "reference.py"
    path.write_text(source)
    return {d.name: d for d in derive_contract(load_reference(path)).dims}


def test_fit_range_keeps_passes_and_excludes_failures() -> None:
    assert fit_range(8, passed=[2, 3, 4, 5, 7, 9, 16], failed=[1]) == (2, None, 1)
    assert fit_range(24, passed=[4, 8, 12, 48], failed=[1, 2, 3, 5, 6, 7, 22, 26]) == (1, None, 4)
    assert fit_range(16, passed=[1, 2, 15, 17], failed=[32]) == (1, 17, 1)
    assert fit_range(8, passed=[], failed=[1, 2, 9, 16]) == (8, 8, 1)  # the reference only
    assert fit_range(8, passed=[1, 2, 3, 9], failed=[]) == (1, None, 1)


def test_batchnorm_batch_of_one_sets_min_instead_of_fixing_the_batch(tmp_path: Path) -> None:
    batch = _derive(tmp_path, BATCHNORM)["batch_size"]
    assert batch.varies and batch.min == 2 and batch.max is None and batch.multiple_of == 1
    assert batch.probes is not None and batch.probes["failed"] == [1]
    assert {2, 3, 16} <= set(batch.probes["passed"])
    assert batch.restricted_because and "min 2: fails at 1" in batch.restricted_because
    assert "Expected more than 1 value per channel" in batch.restricted_because
    assert not batch.admits(1) and batch.admits(2) and batch.admits(1000)


def test_group_divisibility_becomes_multiple_of(tmp_path: Path) -> None:
    dims = _derive(tmp_path, GROUPED)
    channels, groups = dims["channels"], dims["groups"]
    assert channels.varies and channels.multiple_of == 4 and channels.min == 1
    assert channels.probes is not None and {3, 5, 22} <= set(channels.probes["failed"])
    assert "divisible by groups" in (channels.restricted_because or "")
    assert channels.admits(8) and not channels.admits(6)
    # groups must divide the 24 channels: 5, 7, 11 and 13 fail; a max below them holds
    assert groups.varies and groups.admits(2) and not groups.admits(5)
    assert dims["batch_size"].min == 1 and dims["side"].min == 1


def test_a_size_that_shapes_only_parameters_is_a_dim(tmp_path: Path) -> None:
    path = tmp_path / "reference.py"
    path.write_text(MLP)
    contract = derive_contract(load_reference(path))
    hidden = contract.dim("hidden")
    assert hidden.varies and hidden.min == 1 and hidden.probes is not None
    axes = {s for spec in [*contract.tensor_inputs, *contract.outputs] for s in spec.shape}
    assert "hidden" not in axes  # it names no tensor axis
    assert {"batch_size", "in_features", "out_features"} <= axes


def test_a_probe_too_large_to_run_is_not_a_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelgate.contract import derive

    monkeypatch.setattr(derive, "PROBE_NUMEL_LIMIT", 64 * 16)  # the reference's own inputs
    rows = _derive(tmp_path, CPU_ONLY)["rows"]
    assert rows.probes is not None
    assert 128 in rows.probes["not_probed"] and 65 in rows.probes["not_probed"]
    assert rows.probes["failed"] == [] and rows.varies and rows.max is None


def test_probes_past_the_time_are_not_probed_not_failed(tmp_path: Path) -> None:
    path = tmp_path / "reference.py"
    path.write_text(SLOW)
    prober = Prober(load_reference(path), 8, seconds=0.6)
    first = prober.run({"n": 9})
    assert first.outcome == PASSED
    later = [prober.run({"n": v}) for v in (10, 11)]
    assert later[-1].outcome == NOT_PROBED and "spent" in (later[-1].error or "")
    assert all(p.outcome != FAILED for p in later)


def test_a_fixed_dim_says_why(tmp_path: Path) -> None:
    from .test_contract import FIXED_SIZE_REFERENCE

    hidden = _derive(tmp_path, FIXED_SIZE_REFERENCE)["HIDDEN"]
    assert not hidden.varies and hidden.fixed_because
    assert "fails at every probed size" in hidden.fixed_because
    assert "the width is fixed by the weight" in hidden.fixed_because
    assert hidden.probes is not None and hidden.probes["passed"] == []


def test_contract_schema_1_files_still_read(tmp_path: Path) -> None:
    old = {
        "schema": "kernelgate.contract/1",
        "name": "old",
        "dims": [{"name": "n", "reference": 8, "min": 1, "max": None, "multiple_of": 1}],
        "inputs": [{"name": "x", "shape": ["n"], "dtypes": ["float32"]}],
        "outputs": [{"name": "y", "shape": ["n"], "dtype": "float32"}],
        "postcondition": {"reference": "x"},
    }
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    contract = load_contract(path)
    assert contract.schema == CONTRACT_SCHEMA == "kernelgate.contract/4"
    assert contract.dims[0].fixed_because is None and contract.dims[0].probes is None
    path.write_text(json.dumps({**old, "schema": "kernelgate.contract/0"}))
    with pytest.raises(ContractError, match="contract/0"):
        load_contract(path)


def test_time_limits_nest_and_wait_for_imports(tmp_path: Path) -> None:
    outer, inner = footprint.time_limit(0.3), footprint.time_limit(5.0)
    with pytest.raises(footprint.Expired), outer, inner:  # the outer limit applies inside
        time.sleep(2)
    with footprint.time_limit(5.0):
        with footprint.time_limit(0.05):
            pass
        assert 0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 5.0  # the outer one runs on
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0
    (tmp_path / "slow_import_module.py").write_text("import time\ntime.sleep(0.5)\nDONE = True\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(footprint.Expired), footprint.time_limit(0.1):
            import slow_import_module  # noqa: F401 (the limit waits for the import to end)

            time.sleep(2)
        assert sys.modules["slow_import_module"].DONE
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("slow_import_module", None)


class _SpinningManager:
    """A context manager whose ``__enter__`` or ``__exit__`` outlasts the time limit, as
    ``torch.no_grad().__exit__`` can when the limit falls inside it."""

    def __init__(self, spin_in: str, seconds: float = 0.3) -> None:
        self.spin_in, self.seconds = spin_in, seconds
        self.entered = self.exited = False

    def _spin(self, where: str) -> None:
        if where == self.spin_in:
            started = time.monotonic()
            while time.monotonic() - started < self.seconds:
                pass

    def __enter__(self) -> _SpinningManager:
        self._spin("enter")
        self.entered = True
        return self

    def __exit__(self, *exc: object) -> None:
        self._spin("exit")
        self.exited = True


@pytest.mark.parametrize("spin_in", ["enter", "exit"])
def test_a_time_limit_waits_for_enter_and_exit_to_return(spin_in: str) -> None:
    manager = _SpinningManager(spin_in)
    with contextlib.suppress(footprint.Expired), footprint.time_limit(0.05), manager:
        pass
    assert manager.entered and manager.exited  # neither method was cut off half way
    assert signal.getitimer(signal.ITIMER_REAL)[0] == 0


def test_a_time_limit_waits_for_exit_only_so_long() -> None:
    manager = _SpinningManager("exit", seconds=5.0)
    started = time.monotonic()
    with pytest.raises(footprint.Expired), footprint.time_limit(0.05), manager:
        pass
    assert time.monotonic() - started < 0.05 + footprint.TRANSITION_WAIT_SECONDS + 1.0
    assert not manager.exited and signal.getitimer(signal.ITIMER_REAL)[0] == 0


def test_a_time_limit_never_leaves_grad_mode_off() -> None:
    """Limits that expire around ``torch.no_grad()``'s exit (2 of 200 left grad mode off
    before the limit waited for ``__exit__``)."""
    left_off = 0
    for attempt in range(200):
        limit = footprint.time_limit(0.001 + (attempt % 20) * 1e-5)
        with contextlib.suppress(footprint.Expired), limit, torch.no_grad():
            started = time.monotonic()
            while time.monotonic() - started < 0.001:
                pass
        if not torch.is_grad_enabled():
            left_off += 1
            torch.set_grad_enabled(True)
    assert left_off == 0


def _contract(dims: list[Dim], inputs: list[list[str | int]], outputs: list[list[str | int]]):
    return Contract(
        name="c",
        dims=dims,
        inputs=[TensorSpec(f"x{i}", shape, ["float32"]) for i, shape in enumerate(inputs)],
        outputs=[OutputSpec(f"y{i}", shape, "float32") for i, shape in enumerate(outputs)],
        postcondition=_Post(reference="x"),
    )


def test_cmp03_spreads_its_shapes_over_every_dim_batch_first() -> None:
    dims = [Dim("hidden", 32), Dim("cols", 100), Dim("out", 10), Dim("batch", 8, min=2)]
    contract = _contract(dims, [["batch", "cols"]], [["batch", "out"]])
    plan = choose(contract, dims, seed=3, cap=1 << 16)
    assert plan.order == ["batch", "cols", "out", "hidden"]  # batch-like, input, output, other
    assert [p.dim for p in plan.points[:4]] == plan.order  # one each before any gets two
    assert len(plan.points) == MAX_CASES and not plan.unvaried
    assert all(p.value >= 2 for p in plan.points if p.dim == "batch")  # inside its min

    many = [Dim(f"d{i}", 8) for i in range(MAX_CASES_WIDE + 2)]
    contract = _contract(many, [[d.name for d in many[:3]]], [[d.name for d in many]])
    plan = choose(contract, many, seed=3, cap=1 << 16)
    assert case_budget(len(many)) == MAX_CASES_WIDE == len(plan.points)
    assert len({p.dim for p in plan.points}) == MAX_CASES_WIDE
    assert {p.dim for p in plan.points} >= {"d0", "d1", "d2"}  # the input dims first
    assert len(plan.unvaried) == 2
    assert all("case budget" in why for why in plan.unvaried.values())


def test_cmp03_reports_an_unaffordable_dim() -> None:
    dims = [Dim("batch", 8), Dim("kernel", 3)]
    contract = _contract(dims, [["batch"]], [["batch"]])
    plan = choose(contract, dims, seed=1, cap=1 << 16, affordable=lambda d, v: d != "kernel")
    assert {p.dim for p in plan.points} == {"batch"}
    assert "footprint limit" in plan.unvaried["kernel"]


def test_redteam_batch_baked_into_a_view_is_narrowed_to_the_benchmark_batch() -> None:
    """Before issue 17 the batch was fixed (BatchNorm raises at batch 1) and this passed."""
    verdict = kernelgate.verify(
        REDTEAM / "references" / "linear_batchnorm.py",
        REDTEAM / "defects" / "batch_baked_into_view.py",
        only=["CMP-03"],
    )
    gate = verdict.gate("CMP-03")
    assert gate.status is Status.FAIL, gate.reason
    assert gate.evidence["batch_like_dims"] == ["batch_size"]
    assert gate.evidence["dim_order"][0] == "batch_size"
    batch = gate.evidence["sub_domain"]["dims"]["batch_size"]
    assert batch["varies"] is False and batch["min"] == 8
    tried = [s["value"] for s in gate.evidence["shapes"] if s["dim"] == "batch_size"]
    assert tried and min(tried) >= 2  # never below the derived min
    assert verdict.verdict.value == "narrowed"


def test_redteam_mlp_control_varies_its_hidden_width_and_the_defect_is_narrowed() -> None:
    control = kernelgate.verify(
        REDTEAM / "references" / "mlp_hidden.py",
        REDTEAM / "controls" / "mlp_hidden.py",
        only=["CMP-03"],
    ).gate("CMP-03")
    assert control.status is Status.PASS, control.reason
    assert set(control.evidence["dims_varied"]) == {
        "batch_size",
        "in_features",
        "hidden",
        "out_features",
    }
    assert control.evidence["dims_not_varied"] == {}
    defect = kernelgate.verify(
        REDTEAM / "references" / "mlp_hidden.py",
        REDTEAM / "defects" / "hidden_baked_into_kernel.py",
        only=["CMP-03"],
    ).gate("CMP-03")
    assert defect.status is Status.FAIL, defect.reason
    hidden = Dim("hidden", 16, **defect.evidence["sub_domain"]["dims"]["hidden"])
    assert hidden.admits(16) and not hidden.admits(17)
    failing = [s for s in defect.evidence["shapes"] if s["status"] == "fail"]
    assert failing and all(s["dim"] == "hidden" and s["value"] > 16 for s in failing)


def test_cmp03_names_the_dims_it_could_not_vary() -> None:
    """A dim the contract fixes is listed with the contract's reason."""
    verdict = kernelgate.verify(
        DATA / "narrow_linear_reference.py",
        DATA / "narrow_linear_honest.py",
        contract=_fixed_in_features(),
        only=["CMP-03"],
    )
    gate = verdict.gate("CMP-03")
    assert gate.status is Status.PASS, gate.reason
    assert "in_features" in gate.evidence["dims_not_varied"]
    assert "fixed by the contract: kept at 24" in gate.evidence["dims_not_varied"]["in_features"]
    assert "in_features" not in gate.evidence["dims_varied"]
    assert "not varied: in_features" in gate.reason


def _fixed_in_features() -> Contract:
    from dataclasses import replace

    contract = derive_contract(load_reference(DATA / "narrow_linear_reference.py"))
    contract.dims = [
        replace(d, varies=False, fixed_because="kept at 24") if d.name == "in_features" else d
        for d in contract.dims
    ]
    return contract
