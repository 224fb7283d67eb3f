"""Shrinking (``kernelgate.shrink``): a failing case reduced along the contract's dims and
values while the gate fails the same way, within its budget, kept as
``counterexample.shrunk`` and replayed bit for bit by ``kernelgate replay --shrunk`` (and the
unshrunk EXC-01 failure by ``kernelgate replay``, from the same verification)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from kernelgate.cli import point_replays_at
from kernelgate.pipeline import verify
from kernelgate.replay import REPRODUCED, replay
from kernelgate.serde import to_jsonable
from kernelgate.shrink import ShrinkOptions, _smaller_sizes, describe_tensor, rebuild_tensor

from .conftest import ROOT, SOFTMAX

REFERENCE = (SOFTMAX / "reference.py").relative_to(ROOT)


@pytest.fixture(autouse=True)
def _at_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)  # evidence names programs relative to where verify ran


def test_smaller_sizes_keep_the_dims_minimum_and_divisibility() -> None:
    assert _smaller_sizes(1, 1, 1000) == [1, 3, 7, 15, 31, 62, 125, 250, 500]
    assert _smaller_sizes(3, 16, 256) == [16, 32, 64, 128]  # 3 rounds up to 16
    assert _smaller_sizes(16, 16, 16) == []  # nothing admitted below the current size


def test_a_tensor_is_kept_as_fill_and_differing_values_bit_for_bit() -> None:
    value = torch.zeros(3, 4, dtype=torch.bfloat16)
    value[0, 1], value[1, 2], value[2, 3] = float("nan"), -0.0, 1.0 / 3
    value[2, 0] = float("-inf")
    entry = describe_tensor("x", value)
    assert entry is not None and entry["fill"] == 0.0 and entry["dtype"] == "bfloat16"
    positions = [item["position"] for item in json.loads(json.dumps(entry))["values"]]
    assert positions == [[0, 1], [1, 2], [2, 0], [2, 3]]  # -0.0 is not the fill's bits
    back = rebuild_tensor(json.loads(json.dumps(entry)))
    assert back.dtype == torch.bfloat16
    assert torch.equal(back.view(torch.int16), value.view(torch.int16))
    ones = torch.ones(2, 2, dtype=torch.float16)
    assert describe_tensor("y", ones)["values"] == [] and describe_tensor("y", ones)["fill"] == 1.0
    assert describe_tensor("z", torch.randn(70, 70)) is None  # not a few values: not kept


def test_nonfinite_failure_shrinks_and_the_shrunk_case_replays(tmp_path: Path) -> None:
    candidate = (SOFTMAX / "nan_swallow.py").relative_to(ROOT)
    verdict = verify(REFERENCE, candidate, only=["EXC-01"], shrink=ShrinkOptions())
    gate = verdict.gate("EXC-01")
    cx = gate.counterexample
    shrunk = cx.shrunk
    assert shrunk is not None, gate.evidence["shrink"]
    (x,) = shrunk["inputs"]
    assert (x["name"], x["dtype"]) == ("arg0", "float32")  # the contract's name for it
    assert x["shape"][0] * x["shape"][1] < 30 * 1000 // 100  # at most 1% of the original
    assert any(item["value"] == "nan" for item in x["values"])  # what the failure needs
    assert len(x["values"]) <= 8 and x["fill"] in (0.0, 1.0)
    assert shrunk["findings"][0]["expected_class"] == "NAN"
    assert shrunk["findings"][0]["actual_class"] == "FINITE"
    assert set(shrunk["sizes"]) <= {"batch_size", "dim"} and shrunk["sizes"]
    assert gate.evidence["shrink"]["kept"] and 0 < gate.evidence["shrink"]["calls"] <= 60
    # shrinking comes after the gates: the stored counterexample is the gate's own
    assert cx.inputs[0]["shape"] == [30, 1000] and cx.findings[0]["output_position"] == [0, 0]
    out = tmp_path / "evidence.json"
    point_replays_at(verdict, out)
    out.write_text(verdict.to_json())
    assert shrunk["replay"] == f"kernelgate replay {out} --gate EXC-01 --shrunk"
    (result,) = replay(out, ["EXC-01"], shrunk=True).gates
    assert (result.outcome, result.how, result.differences) == (REPRODUCED, "shrunk case", [])
    assert result.reason == shrunk["reason"]
    # the stored (unshrunk) case replays bit for bit too: the NaNs and values came back
    assert cx.replay == f"kernelgate replay {out} --gate EXC-01"
    assert cx.verify.startswith("kernelgate verify ") and "--only EXC-01" in cx.verify
    assert json.loads(out.read_text())["judged_with"]["only"] == ["EXC-01"]
    report = replay(out)
    (result,) = report.gates
    assert (result.gate, result.outcome, result.how) == ("EXC-01", REPRODUCED, "stored case")
    assert result.differences == [] and report.still_fails
    assert result.counterexample["findings"] == json.loads(json.dumps(to_jsonable(cx.findings)))
    assert result.counterexample["findings"][0]["expected"] == "nan"


def test_shrinking_stops_at_its_budget_and_off_means_off() -> None:
    candidate = Path("tests/data/softmax_drops_last_row.py")
    verdict = verify(REFERENCE, candidate, only=["CMP-01"], shrink=ShrinkOptions(max_calls=2))
    gate = verdict.gate("CMP-01")
    # a row fewer at any size: each dim shrinks to 1 at once, then the budget is spent
    assert gate.evidence["shrink"]["calls"] == 2
    assert gate.evidence["shrink"]["stopped"] == "budget of 2 candidate calls spent"
    shrunk = gate.counterexample.shrunk
    assert shrunk is not None and shrunk["sizes"] == {"batch_size": 1, "dim": 1}
    assert [x["shape"] for x in shrunk["inputs"]] == [[1, 1]]
    assert "problem" in shrunk["findings"][0]  # a structure failure, as the gate's own
    plain = verify(REFERENCE, candidate, only=["CMP-01"])
    assert plain.gate("CMP-01").counterexample.shrunk is None
    assert "shrink" not in plain.gate("CMP-01").evidence
