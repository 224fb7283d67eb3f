"""CMP-02 (layouts) and CMP-03 (shapes): each rejects its defective kernels, passes honest ones.

Small references of our own (tests/data/cmp_*) keep the Triton interpreter fast.
"""

from __future__ import annotations

import time

import pytest
import torch

import kernelgate
from kernelgate.contract.load import load_contract
from kernelgate.contract.spec import Dim, Layout
from kernelgate.gates.base import Status
from kernelgate.inputs.layouts import expandable, place_layout
from kernelgate.inputs.shapes import sub_dim

from .conftest import DATA

EW = DATA / "cmp_ew_reference.py"
STRIDED = DATA / "cmp_ew_strided.toml"


@pytest.mark.parametrize("layout", list(Layout))
@pytest.mark.parametrize("misaligned", [False, True])
def test_layouts_keep_logical_values(layout: Layout, misaligned: bool) -> None:
    values = torch.randn(3, 5)
    if layout is Layout.EXPANDED:
        values = expandable(values)
    placed = place_layout(values, layout, misaligned=misaligned)
    assert torch.equal(placed.view(), values)
    described = placed.describe()
    assert (described["byte_misalignment_16"] != 0) == (misaligned or False)
    if layout in (Layout.STRIDED, Layout.TRANSPOSED, Layout.EXPANDED):
        assert not placed.view().is_contiguous()
        assert described["layout"] == layout.value
    if layout is Layout.EXPANDED:
        assert 0 in described["stride"]


def test_expanded_refuses_values_a_broadcast_cannot_hold() -> None:
    with pytest.raises(ValueError, match="constant"):
        place_layout(torch.randn(3, 5), Layout.EXPANDED)


def test_sub_dim_excludes_failures_and_keeps_the_reference() -> None:
    dim = Dim("n", 256)
    ranged = sub_dim(dim, passing=[1, 13, 255], failing=[511, 4096])
    assert ranged.admits(256) and ranged.admits(255) and not ranged.admits(511)
    divisible = sub_dim(dim, passing=[4096], failing=[1, 13, 511])
    assert divisible.multiple_of == 256 and divisible.admits(4096)
    assert not any(divisible.admits(v) for v in (1, 13, 511))
    fixed = sub_dim(dim, passing=[], failing=[1, 4096])
    assert not fixed.varies and fixed.admits(256) and not fixed.admits(257)


def test_cmp02_rejects_contiguous_only_kernel_and_states_passing_layouts() -> None:
    contract = load_contract(STRIDED)
    verdict = kernelgate.verify(EW, DATA / "cmp_contiguous_only.py", contract, only=["CMP-02"])
    gate = verdict.gate("CMP-02")
    assert gate.status is Status.FAIL
    example = gate.counterexample.inputs[0]
    assert example["layout"] in ("strided", "transposed", "expanded")
    assert example["stride"] != [256, 1] and "byte_misalignment_16" in example
    assert gate.evidence["per_layout"]["layout=offset (16-byte misaligned)"]["status"] == "pass"
    assert gate.evidence["sub_domain"]["layouts"]["x"] == ["contiguous", "offset"]
    assert gate.evidence["worst_error_over_bound"] > 1 and gate.evidence["error_model"]


def test_cmp02_passes_honest_kernel_on_every_layout() -> None:
    verdict = kernelgate.verify(EW, DATA / "cmp_honest.py", load_contract(STRIDED), only=["CMP-02"])
    gate = verdict.gate("CMP-02")
    assert gate.status is Status.PASS, gate.reason
    assert len(gate.evidence["per_layout"]) == 7  # offset + 3 views x (aligned, misaligned)
    assert 0 < gate.evidence["worst_error_over_bound"] <= 1


def test_cmp02_rejects_kernel_that_assumes_16_byte_alignment() -> None:
    verdict = kernelgate.verify(EW, DATA / "cmp_misaligned.py", only=["CMP-02"])
    gate = verdict.gate("CMP-02")
    assert gate.status is Status.FAIL and "offset" in gate.reason
    assert gate.counterexample.inputs[0]["byte_misalignment_16"] != 0
    assert gate.evidence["sub_domain"]["layouts"]["arg0"] == ["contiguous"]


@pytest.mark.parametrize(
    ("candidate", "dim", "check"),
    [
        ("cmp_single_block", "rows", lambda d: d.max == 4),
        ("cmp_tail_mask", "cols", lambda d: d.multiple_of > 1 and not d.admits(255)),
    ],
    ids=["single-block", "tail-mask"],
)
def test_cmp03_rejects_shape_bugs_and_states_the_passing_dims(candidate, dim, check) -> None:
    verdict = kernelgate.verify(EW, DATA / f"{candidate}.py", only=["CMP-03"])
    gate = verdict.gate("CMP-03")
    assert gate.status is Status.FAIL
    assert gate.counterexample is not None and gate.counterexample.inputs[0]["shape"] != [4, 256]
    narrowed = Dim(dim, 256 if dim == "cols" else 4, **gate.evidence["sub_domain"]["dims"][dim])
    assert check(narrowed), narrowed
    failing = [s for s in gate.evidence["shapes"] if s["status"] == "fail"]
    assert failing and all(not narrowed.admits(s["value"]) for s in failing if s["dim"] == dim)
    assert gate.evidence["element_cap"] > 0 and len(gate.evidence["shapes"]) >= 8


def test_cmp03_passes_honest_kernel_on_held_out_shapes() -> None:
    gate = kernelgate.verify(EW, DATA / "cmp_honest.py", only=["CMP-03"]).gate("CMP-03")
    assert gate.status is Status.PASS, gate.reason
    values = {s["value"] for s in gate.evidence["shapes"]}
    assert 1 in values and len(gate.evidence["shapes"]) <= 8
    assert all(s["input_elements"] <= gate.evidence["element_cap"] for s in gate.evidence["shapes"])


def test_cmp03_rebuilds_models_when_init_inputs_change() -> None:
    reference = DATA / "narrow_linear_reference.py"
    gate = kernelgate.verify(reference, DATA / "narrow_linear_honest.py", only=["CMP-03"]).gate(
        "CMP-03"
    )
    assert gate.status is Status.PASS, gate.reason
    rebuilt = {s["dim"] for s in gate.evidence["shapes"] if s["rebuilt_model"]}
    assert rebuilt == {"in_features", "out_features"}


def test_cmp03_traces_each_step_and_keeps_few_sized_oracles(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each held-out shape gets an oracle of its own; only the latest few are kept (they hold
    the model in float64 on the device), and the trace says what ran, for how long."""
    import gc
    import re
    import weakref

    from kernelgate.gates import base

    oracles: list[weakref.ref[base.SizedOracle]] = []  # a dataclass: eq, so not hashable
    built, most_alive = [], [0]

    class CountedSizedOracle(base.SizedOracle):
        def __post_init__(self) -> None:
            super().__post_init__()
            oracles.append(weakref.ref(self))
            built.append(dict(self.sizes))
            gc.collect()
            most_alive[0] = max(most_alive[0], sum(ref() is not None for ref in oracles))

    monkeypatch.setattr(base, "SizedOracle", CountedSizedOracle)
    lines: list[str] = []
    verdict = kernelgate.verify(
        DATA / "narrow_linear_reference.py",
        DATA / "narrow_linear_honest.py",
        only=["CMP-03"],
        trace=lines.append,
    )
    gate = verdict.gate("CMP-03")
    assert gate.status is Status.PASS, gate.reason
    shapes = gate.evidence["shapes"]
    assert len(built) == len(shapes) > base.SIZED_ORACLES_KEPT
    assert most_alive[0] <= base.SIZED_ORACLES_KEPT
    for shape in shapes:
        for step in ("oracle built", "expected", "candidate"):
            name = re.escape(f"CMP-03 {step} [{shape['label']}]")
            assert any(re.fullmatch(name + r" \.\.\.", line) for line in lines), (step, shape)
            assert any(re.fullmatch(name + r" \d+\.\d s", line) for line in lines), (step, shape)
    # verify's own phases before the gates are traced the same way, in order
    phases = [
        m.group(1)
        for line in lines
        if (m := re.fullmatch(r"verify (.+) \[verify\] \d+\.\d s", line))
    ]
    assert phases == ["contract", "oracle", "candidate load"]


def test_cmp03_keeps_sizes_that_shape_no_input_within_the_footprint_limit() -> None:
    """A kernel size grows weights and outputs, not inputs: without the footprint limit the
    confirmation shapes reached kernel_size=4096 (a thrashing host on the H200)."""
    from kernelgate.formats.kernelbench import load_reference
    from kernelgate.inputs.footprint import FootprintLimit
    from kernelgate.inputs.shapes import CPU_ELEMENT_CAP

    reference = DATA / "convt_kernel_reference.py"
    program = load_reference(reference)
    footprint = FootprintLimit(program, CPU_ELEMENT_CAP)
    weights, outputs = 2 * 3 * 4 * 4 + 3, 2 * 3 * 18 * 18
    assert footprint.reference.elements == 2 * 2 * 8 * 8 + weights + outputs
    assert footprint.reference.flops > 0  # FlopCounterMode counts the convolution
    huge = program.footprint(kernel_size=4096)
    assert huge is not None and huge.elements > footprint.limit.elements
    assert footprint.admits("kernel_size", 5) and not footprint.admits("kernel_size", 4096)
    assert not footprint.admits("kernel_size", 5000)  # larger than a refused size: unmeasured
    assert "larger than the refused kernel_size=4096" in footprint.refused["kernel_size=5000"]

    gate = kernelgate.verify(reference, DATA / "convt_kernel_fixed.py", only=["CMP-03"]).gate(
        "CMP-03"
    )
    assert gate.status is Status.FAIL, gate.reason
    assert gate.evidence["footprint_limit"] == {
        "elements": footprint.limit.elements,
        "flops": footprint.limit.flops,
    }
    tried = [s["value"] for s in gate.evidence["shapes"] if s["dim"] == "kernel_size"]
    assert tried and gate.evidence["confirmations"]
    assert all(footprint.admits("kernel_size", v) for v in tried)
    assert max(tried) < max(gate.evidence["pools"]["kernel_size"]["block"])  # 129 refused
    refused = gate.evidence["footprint_refused"]
    assert all(size.startswith("kernel_size=") for size in refused)
    # confirmations stay within what the plan reached (or twice the reference): never the
    # pools' largest sizes, which the footprint limit would have had to refuse
    planned = [
        s["value"]
        for s in gate.evidence["shapes"]
        if s["dim"] == "kernel_size" and s["family"] != "confirm"
    ]
    confirmed = [
        s["value"]
        for s in gate.evidence["shapes"]
        if s["dim"] == "kernel_size" and s["family"] == "confirm"
    ]
    assert all(v <= max([*planned, 2 * program.sizes["kernel_size"]]) for v in confirmed)
    inputs_left_to_the_cap = FootprintLimit(program, CPU_ELEMENT_CAP, frozenset({"batch"}))
    assert inputs_left_to_the_cap.admits("batch", 1 << 30)  # the input cap bounds it
    assert gate.evidence["sub_domain"]["dims"]["kernel_size"]["varies"] is False


def test_footprint_flop_limit_refuses_work_the_element_limit_admits() -> None:
    """A kernel size can hold few elements yet cost far more flops than the reference."""
    from kernelgate.formats.kernelbench import load_reference
    from kernelgate.inputs.footprint import FOOTPRINT_FACTOR, FootprintLimit
    from kernelgate.inputs.shapes import DEVICE_ELEMENT_CAP

    program = load_reference(DATA / "convt_kernel_reference.py")
    with program.rebound(channels=64, side=32):  # many input channels: flops outgrow elements
        footprint = FootprintLimit(program, DEVICE_ELEMENT_CAP)
        refused = [k for k in range(200, 400, 10) if not footprint.admits("kernel_size", k)]
        assert refused, "some kernel size must cost too much"
        first = program.footprint(kernel_size=refused[0])
    assert first is not None and first.flops > footprint.limit.flops >= FOOTPRINT_FACTOR
    assert first.elements <= footprint.limit.elements  # only the flop limit refused it
    assert "flops" in footprint.refused[f"kernel_size={refused[0]}"]


def test_footprint_measuring_time_is_bounded() -> None:
    """Measuring is bounded: a measurement past the time is cut off and refused, and after
    the time only sizes up to the reference's are admitted, unmeasured."""
    from kernelgate.formats.kernelbench import load_reference
    from kernelgate.inputs.footprint import FootprintLimit
    from kernelgate.inputs.shapes import CPU_ELEMENT_CAP

    program = load_reference(DATA / "slow_footprint_reference.py")
    # torch's first meta-device run imports sympy and dynamo (1-2 s, once a process): done
    # here, so the 1 s budget measures sizes and not imports (alone, the test failed on it)
    program.footprint(steps=1)
    started = time.monotonic()
    footprint = FootprintLimit(program, CPU_ELEMENT_CAP, seconds=1.0)
    assert not footprint.admits("steps", 100_000)  # would take minutes on the meta device
    assert "not measured within" in footprint.refused["steps=100000"]
    assert footprint.admits("steps", 1) and not footprint.admits("steps", 9)
    assert "after the measuring time" in footprint.refused["steps=9"]
    assert time.monotonic() - started < 10
