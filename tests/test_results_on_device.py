"""Oracle results kept on the oracle's device (issue 19): the float64 results and the honest
runs stay where they were computed, are judged there against the candidate's output, and
come to the host only over a per-judge budget, when the device runs out of memory, or with
``KERNELGATE_RESULTS_ON_DEVICE=0``; verdicts are the same whichever way.

On the CPU these tests check the switch, the oracle's routing on a device that is not the
host (PyTorch's ``meta`` device: it computes shapes, not values, so only where results go
is checked there) and that the CPU path is unchanged. The GPU tests (``-m gpu``, on CUDA)
check values: every consumer judges alike whatever device the results lie on, a judged
case brings no result to the host, and the budget and out-of-memory fallbacks give the
same judgement and say so.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

import kernelgate
from kernelgate.contract.derive import contract_for
from kernelgate.formats.kernelbench import load_reference
from kernelgate.gates import base
from kernelgate.gates.base import GateContext
from kernelgate.oracle import fp64
from kernelgate.oracle.error_models import Assessment, assess_with
from kernelgate.oracle.fp64 import RESULTS_ON_DEVICE_ENV, Oracle, held, results_device
from kernelgate.oracle.output_kinds import assess_exact
from kernelgate.oracle.zero_sign import OpenSigns, _Folding, open_signs
from kernelgate.redteam.catalog import ROOT as REDTEAM

from .conftest import SOFTMAX

RELU = REDTEAM / "references" / "relu.py"
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


class _HostCopies:
    """Counts calls of the host-copy helper (``inputs/host.py:to_host``) with a tensor that
    is not on the host, where the oracle (fp64) and the gate context (base) call it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, stand_in: bool = False) -> None:
        self.device_tensors = 0
        original = fp64.to_host

        def counted(tensor: torch.Tensor) -> torch.Tensor:
            if tensor.device.type != "cpu":
                self.device_tensors += 1
                if stand_in:  # a meta tensor has no values to copy: an empty host tensor
                    return torch.empty(tensor.shape, dtype=tensor.dtype)
            return original(tensor)

        monkeypatch.setattr(fp64, "to_host", counted)
        monkeypatch.setattr(base, "to_host", counted)


# -- CPU -------------------------------------------------------------------------------------
def test_the_switch_decides_where_results_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(RESULTS_ON_DEVICE_ENV, raising=False)
    assert results_device("cuda:1") == torch.device("cuda:1")
    assert results_device(torch.device("meta")) == torch.device("meta")
    assert results_device("cpu") == torch.device("cpu")
    monkeypatch.setenv(RESULTS_ON_DEVICE_ENV, "1")
    assert results_device("cuda") == torch.device("cuda")
    monkeypatch.setenv(RESULTS_ON_DEVICE_ENV, " 0 ")
    assert results_device("cuda:0") == torch.device("cpu")
    assert results_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("reference", [RELU, SOFTMAX / "reference.py"], ids=["relu", "softmax"])
def test_an_oracle_off_the_host_keeps_its_results_there(
    monkeypatch: pytest.MonkeyPatch, reference: Path
) -> None:
    """On a device that is not the host (meta), the float64 results and the native run stay
    there: the host-copy helper is never called. With the switch at 0 every result goes
    through it, once per output."""
    monkeypatch.delenv(RESULTS_ON_DEVICE_ENV, raising=False)
    copies = _HostCopies(monkeypatch, stand_in=True)
    program = load_reference(reference)
    inputs = program.inputs(seed=42)
    oracle = Oracle(program, torch.device("meta"))
    oracle._repeatable_checked = True  # the repeat check compares values: meta has none
    assert oracle.results_device == torch.device("meta")
    expected, native = oracle.expected(inputs), oracle.native(inputs)
    assert [t.device.type for t in expected + native] == ["meta"] * (len(expected) * 2)
    assert expected[0].dtype == torch.float64 and native[0].dtype == inputs[0].dtype
    assert copies.device_tensors == 0

    monkeypatch.setenv(RESULTS_ON_DEVICE_ENV, "0")
    oracle = Oracle(program, torch.device("meta"))
    oracle._repeatable_checked = True
    assert oracle.results_device == torch.device("cpu")
    expected, native = oracle.expected(inputs), oracle.native(inputs)
    assert all(t.device.type == "cpu" for t in expected + native)
    assert copies.device_tensors == len(expected) + len(native)


def test_a_view_into_a_larger_storage_is_kept_compact() -> None:
    """A reference that returns a slice of an intermediate: the judge keeps the slice's
    bytes, not the intermediate's (what ``GateContext._cached`` counts is what is held)."""
    meta = torch.device("meta")
    whole = torch.empty(100, 7, device=meta, dtype=torch.float64)
    kept = held([whole[:10], (whole, 3)], meta)
    assert kept[0].untyped_storage().nbytes() == 10 * 7 * 8
    assert kept[0].shape == (10, 7) and kept[0].device == meta
    assert kept[1][0] is whole and kept[1][1] == 3  # a whole storage is kept as it is


def test_the_cpu_path_keeps_results_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """Oracle on the CPU: results on the host, nothing to spill, no budget applied, and an
    assessment's params exactly what they were (no ``oracle_results_held``)."""
    monkeypatch.delenv(RESULTS_ON_DEVICE_ENV, raising=False)
    monkeypatch.setattr(base, "RESULTS_DEVICE_KEPT_BYTES", 0)  # would push everything off
    ctx = _context(RELU, "cpu")
    case = ctx.drawn_case("normal", 1)
    expected = ctx.expected(case)[0]
    assert expected.device.type == "cpu" and ctx.oracle.results_device.type == "cpu"
    assessment = ctx.assess(case, 0, expected.float())
    assert assessment.passed and "oracle_results_held" not in assessment.params
    assert "judged_on" not in assessment.params
    assert ctx.spill("test") is False
    assert ctx.held_on_host(case) == {} and ctx.device_bytes_held() == 0
    assert ctx.expected(case)[0] is expected  # still the cached result


def test_results_on_the_host_walk_every_structure_the_cache_holds() -> None:
    """``_on_host`` rebuilds lists, tuples, dicts and dataclasses (``OpenSigns``) around host
    tensors and returns host tensors themselves; device-only byte counts skip the host."""
    a, b = torch.zeros(3, dtype=torch.bool), torch.ones(3, dtype=torch.bool)
    signs = OpenSigns(sign_open=a, class_open=b)
    value = [(a, 2), {"k": b}, signs, None]
    moved = base._on_host(value)
    assert moved[0][0] is a and moved[0][1] == 2 and moved[1]["k"] is b and moved[3] is None
    assert isinstance(moved[2], OpenSigns) and moved[2].class_open is b
    assert base._tensor_bytes(value) == 6
    assert base._tensor_bytes(value, device_only=True) == 0


# -- GPU -------------------------------------------------------------------------------------
def _context(reference: Path, device: str) -> GateContext:
    """A context without a worker: the oracle side of a verification only."""
    program = load_reference(reference)
    return GateContext(
        contract=contract_for(program),
        oracle=Oracle(program, torch.device(device)),
        session=None,
        seed=0,
        replay=[],
    )


def assert_same_assessment(a: Assessment, b: Assessment) -> None:
    """Two judgements of one output agree in everything a verdict reads from them (the
    values judged are the same bits, and the same kernels run on them: the last bits of a
    float64 reduction are all that could differ)."""
    assert (a.passed, a.judged, a.excluded, a.class_mismatches) == (
        b.passed,
        b.judged,
        b.excluded,
        b.class_mismatches,
    )
    assert a.worst_ratio == pytest.approx(b.worst_ratio, rel=1e-12, abs=0)
    assert [m["output_position"] for m in a.mismatches] == [
        m["output_position"] for m in b.mismatches
    ]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("model", ["elementwise", "order", "ensemble"])
@pytest.mark.parametrize("actual_on", ["cuda", "cpu"])
def test_error_models_judge_alike_whatever_device_the_results_are_on(
    model: str, actual_on: str
) -> None:
    g = torch.Generator().manual_seed(0)
    expected = torch.randn(64, 33, generator=g, dtype=torch.float64)
    actual = expected.float()
    actual[3, 5] += 1.0  # one position past every bound
    honest = {"native-eager": expected.float() * (1 + 1e-7)}
    magnitude = expected.abs() * 4
    params: dict[str, Any] = {"magnitude": "output"}

    def judged(device: str) -> Assessment:
        return assess_with(
            model,
            params,
            expected.to(device),
            actual.to(actual_on),
            {k: v.to(device) for k, v in honest.items()},
            magnitude=magnitude.to(device),
            n=33,
        )

    on_host, on_device = judged("cpu"), judged("cuda")
    assert not on_host.passed
    assert_same_assessment(on_device, on_host)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("actual_on", ["cuda", "cpu"])
def test_exact_outputs_judge_alike_whatever_device_the_results_are_on(actual_on: str) -> None:
    expected = torch.arange(40, dtype=torch.float64).reshape(5, 8)
    actual = expected.to(torch.int64)
    actual[2, 3] += 1
    on_host = assess_exact(expected, actual.to(actual_on))
    on_device = assess_exact(expected.cuda(), actual.to(actual_on))
    assert not on_host.passed and on_host.note == on_device.note
    assert_same_assessment(on_device, on_host)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_open_sign_folding_alike_whatever_device_the_results_are_on(dtype: torch.dtype) -> None:
    tiny = float(torch.finfo(dtype).tiny)
    want = torch.tensor([0.0, -0.0, tiny / 4, -tiny, 1.0, float("nan"), float("inf"), -2.0])
    variant = torch.tensor([-0.0, -0.0, -tiny / 4, -tiny, 1.0, float("nan"), 0.0, 2.0])
    taint = torch.tensor([float("nan"), 0.0, 0.0, float("nan"), 1.0, 0.0, float("nan"), 0.0])
    results = []
    for device in ("cpu", "cuda"):
        folding = _Folding.start(want.double().to(device), dtype)
        folding.variant(variant.double().to(device))
        folding.taint(taint.double().to(device))
        results.append(folding.result())
    host, device = results
    assert torch.equal(device.sign_open.cpu(), host.sign_open)
    assert torch.equal(device.class_open.cpu(), host.class_open)
    assert bool(host.class_open.any()) and bool(host.sign_open.any())


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("what", ["relu(a) * b + c", "exp(-1 / relu(a))"])
def test_open_signs_alike_whatever_device_the_reference_runs_on(what: str) -> None:
    """The zero-sign variants run where the oracle runs and are folded there: the same open
    signs and classes as on the host."""
    neg0 = -0.0
    values = {
        "a": [neg0, 0.0, neg0, 1.0, neg0, -2.0],
        "b": [1.0, -1.0, 1.0, neg0, 1.0, 3.0],
        "c": [neg0, neg0, 3.0, neg0, 0.0, neg0],
    }
    found = []
    for device in ("cpu", "cuda"):
        a, b, c = (torch.tensor(v, dtype=torch.float64, device=device) for v in values.values())

        def run(a=a, b=b, c=c) -> list[torch.Tensor]:
            relu = torch.relu(a)
            return [relu * b + c] if what.startswith("relu") else [torch.exp(-1.0 / relu)]

        (signs,) = open_signs(run, run(), [torch.float32])
        found.append(signs)
    host, device = found
    assert host is not None and device is not None
    assert bool(host.sign_open.any() or host.class_open.any())
    assert torch.equal(device.sign_open.cpu(), host.sign_open)
    assert torch.equal(device.class_open.cpu(), host.class_open)


def _same_case(ctx: GateContext, values: list[torch.Tensor]) -> base.Case:
    return base.Case("normal", 0, [v.clone() for v in values])


@pytest.mark.gpu
@needs_cuda
def test_dependence_probes_alike_whatever_device_the_results_are_on(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """EXC-01's coarse, refined and completion probes on a CUDA oracle that keeps its
    results there: the values the CPU oracle gives, and no result brought to the host."""
    from .test_oracle import ADDITIVE_MASK_ATTENTION, MASKED_ROW_SUM

    monkeypatch.delenv(RESULTS_ON_DEVICE_ENV, raising=False)
    (tmp_path / "rows").mkdir()
    (tmp_path / "attention").mkdir()
    rows = tmp_path / "rows" / "reference.py"
    rows.write_text(MASKED_ROW_SUM)
    attention = tmp_path / "attention" / "reference.py"
    attention.write_text(ADDITIVE_MASK_ATTENTION)

    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    x[0, 1], x[0, 5] = float("inf"), float("nan")
    disputed = torch.zeros(4, 6, dtype=torch.bool)
    disputed[0, 1:] = True
    probes = []
    for device in ("cpu", "cuda"):
        ctx = _context(rows, device)
        copies = _HostCopies(monkeypatch)
        case = _same_case(ctx, [x])
        coarse = ctx.dependence_probe(case)[0]
        refined = ctx.refined_dependence_probe(case, 0, disputed.to(coarse.device))[0]
        assert coarse.device.type == refined.device.type == device
        assert copies.device_tensors == 0
        probes.append((coarse.cpu(), refined.cpu()))
    for on_host, on_device in zip(*probes, strict=True):
        # float64 sums reordered on the device: last bits only; NaN and Inf where the host has them
        torch.testing.assert_close(on_device, on_host, rtol=1e-12, atol=1e-12, equal_nan=True)

    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(5, 4, generator=g) for _ in range(3))
    q[1, 0] = float("inf")
    k[:2, 0] = -k[:2, 0].abs() - 0.5
    k[2:, 0] = k[2:, 0].abs() + 0.5
    v[3, 2] = float("nan")
    disputed = torch.zeros(5, 4, dtype=torch.bool)
    disputed[1], disputed[3, 2] = True, True
    completions = []
    for device in ("cpu", "cuda"):
        ctx = _context(attention, device)
        case = _same_case(ctx, [q, k, v])
        expected = ctx.expected(case)
        found = ctx.completion_probes(case, 0, disputed.to(expected[0].device), expected)
        assert len(found) == 2 and found[0][0].device.type == device
        completions.append([alternative[0].cpu() for alternative in found])
    for on_host, on_device in zip(*completions, strict=True):
        # float64 sums reordered on the device: last bits only; NaN and Inf where the host has them
        torch.testing.assert_close(on_device, on_host, rtol=1e-12, atol=1e-12, equal_nan=True)


def _pair(reference: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[GateContext, GateContext]:
    """The same oracle side twice on CUDA: results kept on the device, and on the host."""
    monkeypatch.delenv(RESULTS_ON_DEVICE_ENV, raising=False)
    on_device = _context(reference, "cuda")
    monkeypatch.setenv(RESULTS_ON_DEVICE_ENV, "0")
    on_host = _context(reference, "cuda")
    monkeypatch.delenv(RESULTS_ON_DEVICE_ENV)
    assert on_device.oracle.results_device.type == "cuda"
    assert on_host.oracle.results_device.type == "cpu"
    return on_device, on_host


def _judge_twice(ctx: GateContext, seed: int) -> list[Assessment]:
    """A case judged with the exact output (passes: no honest run) and with one position
    wrong (fails: the honest runs are made), the outputs on the device as IPC brings them."""
    case = ctx.drawn_case("normal", seed)
    exact = ctx.expected(case)[0].to("cuda", torch.float32)
    wrong = exact.clone()
    wrong.view(-1)[7] += 1.0
    return [ctx.assess(case, 0, exact), ctx.assess(case, 0, wrong)]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("reference", [RELU, SOFTMAX / "reference.py"], ids=["relu", "softmax"])
def test_a_judged_case_brings_no_result_to_the_host(
    monkeypatch: pytest.MonkeyPatch, reference: Path
) -> None:
    """Elementwise (ReLU) and reduction (softmax, the order model with its magnitude run):
    the expected result, the magnitudes and the native run stay on the device, and the
    judgement is the one the host path gives."""
    on_device, on_host = _pair(reference, monkeypatch)
    copies = _HostCopies(monkeypatch)
    judged = _judge_twice(on_device, 1)
    assert copies.device_tensors == 0
    assert on_device.evaluations["honest:native-eager"] == 1  # the failing output asked
    for results in on_device._results.values():
        for what, value in results.entries.items():
            values = value[0] if what == "magnitude" else value
            tensors = [v for v in values if isinstance(v, torch.Tensor)]
            assert all(t.device.type == "cuda" for t in tensors), what
    assert on_device.device_bytes_held() > 0
    baseline = _judge_twice(on_host, 1)
    assert copies.device_tensors > 0  # the host path copies: the counter sees copies
    assert [a.passed for a in judged] == [True, False]
    for a, b in zip(judged, baseline, strict=True):
        assert_same_assessment(a, b)
        assert "oracle_results_held" not in a.params


@pytest.mark.gpu
@needs_cuda
def test_over_the_device_budget_results_are_kept_on_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    on_device, on_host = _pair(SOFTMAX / "reference.py", monkeypatch)
    monkeypatch.setattr(base, "RESULTS_DEVICE_KEPT_BYTES", 0)
    judged, baseline = _judge_twice(on_device, 2), _judge_twice(on_host, 2)
    assert on_device.device_bytes_held() == 0
    for a, b in zip(judged, baseline, strict=True):
        assert_same_assessment(a, b)
        held_params = a.params["oracle_results_held"]
        assert "over the device budget" in held_params["expected"]


@pytest.mark.gpu
@needs_cuda
def test_out_of_memory_while_judging_spills_the_results_to_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The device runs out of memory in the judgement's arithmetic (raised there once): the
    results go to the host, the output is judged on the CPU, and the params say both."""
    on_device, on_host = _pair(RELU, monkeypatch)
    baseline = _judge_twice(on_host, 3)
    raised = []

    def short_of_memory(*args: Any, **kwargs: Any) -> Assessment:
        if args[2].device.type == "cuda" and not raised:
            raised.append(True)
            raise torch.OutOfMemoryError("CUDA out of memory (test)")
        return assess_with(*args, **kwargs)

    monkeypatch.setattr(base, "assess_with", short_of_memory)
    judged = _judge_twice(on_device, 3)
    assert raised
    assert judged[0].params["judged_on"].startswith("cpu")
    assert "judged_on" not in judged[1].params  # one shortage: the next is judged there
    for assessment in judged:  # the spilled result stays on the host, and says so
        assert "out of memory" in assessment.params["oracle_results_held"]["expected"]
    for a, b in zip(judged, baseline, strict=True):
        assert_same_assessment(a, b)


BIG_RELU = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(4096, 4096)]

def get_init_inputs():
    return []
"""


@pytest.mark.gpu
@needs_cuda
def test_with_the_device_full_the_judgement_is_the_same_and_says_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A real shortage: once the oracle's result (128 MiB in float64) is held, nearly all
    free device memory is taken; judging needs several temporaries of that size, runs out,
    spills the results and judges on the CPU, as the CPU oracle does."""
    reference = tmp_path / "reference.py"
    reference.write_text(BIG_RELU)
    monkeypatch.delenv(RESULTS_ON_DEVICE_ENV, raising=False)
    ctx, on_cpu = _context(reference, "cuda"), _context(reference, "cpu")
    case = ctx.drawn_case("normal", 4)
    host_case = base.Case(case.label, case.seed, list(case.values))  # the same values
    actual = ctx.expected(case)[0].to("cuda", torch.float32)
    baseline = on_cpu.assess(host_case, 0, actual.cpu())
    torch.cuda.empty_cache()
    hog = None
    margin = 64 << 20
    try:
        free, _ = torch.cuda.mem_get_info()
        while hog is None and free > margin:
            try:
                hog = torch.empty(free - margin, dtype=torch.uint8, device="cuda")
            except torch.OutOfMemoryError:
                free -= 256 << 20  # fragmentation: ask for less
        judged = ctx.assess(case, 0, actual)
    finally:
        del hog
        torch.cuda.empty_cache()
    assert judged.params.get("judged_on", "").startswith("cpu"), judged.params
    assert "out of memory" in judged.params["oracle_results_held"]["expected"]
    assert_same_assessment(judged, baseline)


# Elementwise, a reduction, a defect each of EXC-01 and EXC-02 (the dependence and the
# open-sign probes), and index outputs.
PAIRS = [
    (RELU, REDTEAM / "controls" / "relu.py"),
    (SOFTMAX / "reference.py", SOFTMAX / "honest.py"),
    (SOFTMAX / "reference.py", SOFTMAX / "nan_swallow.py"),
    (RELU, REDTEAM / "defects" / "flush_subnormals.py"),
    (REDTEAM / "references" / "topk.py", REDTEAM / "controls" / "topk.py"),
]
VALUE_GATES = {"CMP-01", "CMP-02", "CMP-03", "ORD-01", "PRC-01", "PRC-02", "EXC-01", "EXC-02"}


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0].stem}-{p[1].stem}")
def test_a_verification_keeps_results_on_the_device_with_the_same_verdict(
    monkeypatch: pytest.MonkeyPatch, pair: tuple[Path, Path]
) -> None:
    """Whole verifications on CUDA (worker, IPC): no oracle result comes to the host through
    the host-copy helper, and the verdict, every gate's status and every value gate's reason
    are those of ``KERNELGATE_RESULTS_ON_DEVICE=0``."""
    reference, candidate = pair
    copies = _HostCopies(monkeypatch)
    monkeypatch.delenv(RESULTS_ON_DEVICE_ENV, raising=False)
    on_device = kernelgate.verify(reference, candidate, device="cuda", timeout=60)
    kept_there = copies.device_tensors
    monkeypatch.setenv(RESULTS_ON_DEVICE_ENV, "0")
    on_host = kernelgate.verify(reference, candidate, device="cuda", timeout=60)
    assert kept_there == 0
    assert copies.device_tensors > 0  # the host path copies every result: the counter works
    assert_same_judgement(on_device, on_host)


def assert_same_judgement(a: Any, b: Any) -> None:
    """Two verdicts of one pair agree: the verdict, every gate's status, and every value
    gate's reason (the judgement a switch of where the judge keeps its data must not move)."""
    assert a.verdict == b.verdict
    assert [(g.id, g.status) for g in a.gates] == [(g.id, g.status) for g in b.gates]
    for gate_a, gate_b in zip(a.gates, b.gates, strict=True):
        if gate_a.id in VALUE_GATES:
            assert gate_a.reason == gate_b.reason, gate_a.id
