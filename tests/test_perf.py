"""Performance acceptance on the CPU (docs/perf.md): the protocol, its checks, the timing
hacks that the interpreter can show, and ``kernelgate bench``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelgate.contract.derive import contract_for
from kernelgate.formats.kernelbench import load_reference
from kernelgate.perf.bench import NOT_JUDGED, perf_without_gates
from kernelgate.perf.measure import PerfOptions, ShapeTiming, _not_verified, perf_shapes
from kernelgate.redteam.timing_hacks import HONEST, TIMING_HACKS, TimingHack

from .conftest import SOFTMAX, kernelgate

# Small enough for the interpreter: one shape, a few trials of each protocol.
QUICK = PerfOptions(trials=4, kernelbench_trials=4, warmup=1, shapes=1, samples=2)
CPU_HACKS = [h for h in TIMING_HACKS if h.device_only is None]


def _measure(candidate: Path, reference: Path | None = None) -> dict:
    reference = reference or TIMING_HACKS[0].reference_path
    return perf_without_gates(reference, candidate, options=QUICK).to_dict()


def test_shapes_start_at_the_reference_and_stay_in_the_domain() -> None:
    program = load_reference(SOFTMAX / "reference.py")
    contract = contract_for(program)
    shapes = perf_shapes(contract, dict(program.sizes), 3)
    assert shapes[0] == {}
    assert len(shapes) == 3
    dims = {d.name: d for d in contract.dims}
    for sizes in shapes[1:]:
        ((name, value),) = sizes.items()
        assert dims[name].admits(value) and value != dims[name].reference
    # batch-like first: the leading dim of the input moves before the row length
    assert set(shapes[1]) == {"batch_size"}
    # a narrowed domain (batch_size at most its reference) is never left for a shape
    batch = dims["batch_size"]
    batch.max = batch.reference
    narrowed = perf_shapes(contract, dict(program.sizes), 3)
    assert {"batch_size": batch.reference * 2} not in narrowed
    assert {"batch_size": batch.reference // 2} in narrowed
    # a contract that fixes every dim leaves the reference's shape alone
    for dim in contract.dims:
        dim.varies = False
    assert perf_shapes(contract, dict(program.sizes), 3) == [{}]


def test_a_speedup_is_verified_only_where_the_verdict_holds_and_outputs_pass() -> None:
    good = ShapeTiming("reference shape", {}, speedup=2.0, outputs_ok=True)
    assert _not_verified("verified", [good]) == ""
    assert _not_verified("narrowed", [good]) == ""
    assert "rejected" in _not_verified("rejected", [good])
    assert "judged" in _not_verified(NOT_JUDGED, [good])
    bad = ShapeTiming("x=2", {"x": 2}, speedup=3.0, problems=["trial 1, output 0: wrong"])
    assert "trial 1" in _not_verified("verified", [good, bad])
    assert _not_verified("verified", []) != ""


def test_honest_kernel_is_timed_on_fresh_inputs_with_outputs_checked() -> None:
    report = _measure(HONEST)
    assert report["clock"] == "cpu-perf-counter"
    assert "CPU-interpreter" in report["note"]
    (shape,) = report["shapes"]
    assert shape["outputs_ok"] and shape["problems"] == []
    assert len(shape["sampled_trials"]) == QUICK.samples
    assert shape["candidate"]["trials"] == shape["reference"]["trials"] == QUICK.trials
    assert shape["kernelbench_candidate"]["trials"] == QUICK.kernelbench_trials
    # the protocol's own cost, measured around an empty call, is far below an interpreted
    # kernel's time
    assert 0 < shape["candidate"]["floor_median_ms"] < shape["candidate"]["median_ms"] / 10
    assert shape["speedup"] == pytest.approx(
        shape["reference"]["median_ms"] / shape["candidate"]["median_ms"]
    )
    # without a verdict nothing is called verified, however fast
    assert report["verified_speedup"] is None
    assert report["not_verified_because"].startswith(f"the verdict is {NOT_JUDGED}")


@pytest.mark.parametrize("hack", CPU_HACKS, ids=lambda h: h.name)
def test_timing_hack_gets_no_speedup_it_did_not_earn(hack: TimingHack) -> None:
    report = _measure(hack.candidate_path, hack.reference_path)
    (shape,) = report["shapes"]
    if hack.caught_by == "outputs":
        assert not shape["outputs_ok"] and shape["problems"], shape
        assert report["verified_speedup"] is None
        return
    # The judged protocol is not fooled: interpreted Triton never beats eager PyTorch on the
    # CPU, so any speedup >= 1 here would be unearned.
    assert shape["outputs_ok"], shape["problems"]
    assert shape["speedup"] < 1.0, shape
    # KernelBench's method on the same kernel is fooled (a lookup, a clock 100x slow): the
    # hack works, and the judge ignores it. (Its *speedup* also moves with the reference's
    # warm-cache time, so the candidate's own times are compared.)
    fooled, judged = shape["kernelbench_candidate"], shape["candidate"]
    assert fooled["median_ms"] * 10 < judged["median_ms"], shape


def test_bench_command_on_the_softmax_example(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    args = ["--only", "MEM-01", "--shapes", "1", "--trials", "3", "--kernelbench-trials", "2"]
    result = kernelgate(
        "bench",
        str(SOFTMAX / "reference.py"),
        str(SOFTMAX / "honest.py"),
        *args,
        "--json",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    assert "verified speedup" in result.stdout
    assert "CPU-interpreter timing" in result.stdout
    evidence = json.loads(out.read_text())
    perf = evidence["perf"]
    assert evidence["verdict"] == "verified"
    assert perf["schema"] == "kernelgate.perf/1"
    assert perf["verified_speedup"] == pytest.approx(perf["speedup"])
    assert perf["shapes"][0]["outputs_ok"]


def test_bench_without_gates_never_verifies(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    result = kernelgate(
        "bench",
        str(SOFTMAX / "reference.py"),
        str(SOFTMAX / "answer_cache.py"),
        "--no-gates",
        "--shapes",
        "1",
        "--trials",
        "3",
        "--kernelbench-trials",
        "2",
        "--json",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(out.read_text())
    assert report["verified_speedup"] is None
    # the example's shape-keyed cache replays its first answer: the sampled outputs say so
    assert not report["shapes"][0]["outputs_ok"]
    assert "no verified speedup" in result.stdout
