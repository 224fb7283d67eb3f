"""A case's inputs uploaded once (issue 19): where the oracle runs on a device, the judge
keeps one copy of each case's admitted values there (``GateContext.oracle_inputs``), and
every oracle run of the case (float64, native, magnitude, open signs, index sources,
dependence probes) casts or clones from it instead of uploading from the host; the CPU
honest runs' results are kept on the device once, not uploaded for every judgement.

On the CPU these tests count uploads on PyTorch's ``meta`` device (a real device that is
not the host: it holds shapes, not values, and refuses to copy anything back, so an
accidental download fails loudly), check that no run writes into the copy (a tensor's
version counter counts in-place writes there too), the budget, the spill and the switch,
and that the CPU path is unchanged. The GPU tests (``-m gpu``) check values: the same
judgements and verdicts with and without the copy, with uploads counted.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch

import kernelgate
from kernelgate.contract.derive import contract_for
from kernelgate.formats.kernelbench import load_reference
from kernelgate.gates import base
from kernelgate.gates.base import Case, GateContext
from kernelgate.oracle import fp64
from kernelgate.oracle.error_models import Assessment
from kernelgate.oracle.fp64 import INPUTS_ON_DEVICE_ENV, Oracle, run_copies
from kernelgate.redteam.catalog import ROOT as REDTEAM

from .conftest import SOFTMAX
from .test_results_on_device import PAIRS, assert_same_assessment, assert_same_judgement

RELU = REDTEAM / "references" / "relu.py"
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

# A reference that writes into both of its inputs (a float64 one, which a float64 cast
# leaves as it is, and an integer one, which no cast touches) before reading them.
WRITES_INTO_INPUTS = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x, k):
        x.mul_(2.0)
        k.add_(1)
        return x * k

def get_inputs():
    return [torch.randn(8, 4, dtype=torch.float64), torch.randint(0, 3, (8, 4))]

def get_init_inputs():
    return []
"""


class _Uploads:
    """Counts ``Tensor.to`` calls that take a host tensor to another device, per source
    storage (by address): how often each of a case's inputs crosses to the device."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.by_storage: Counter[int] = Counter()
        original = torch.Tensor.to

        def counted(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            moved = original(tensor, *args, **kwargs)
            if tensor.device.type == "cpu" and moved.device.type != "cpu":
                self.by_storage[tensor.untyped_storage().data_ptr()] += 1
            return moved

        monkeypatch.setattr(torch.Tensor, "to", counted)

    def of(self, values: list[Any]) -> list[int]:
        """Uploads of each tensor in ``values``."""
        return [
            self.by_storage[v.untyped_storage().data_ptr()]
            for v in values
            if isinstance(v, torch.Tensor)
        ]


def _context(reference: Path, device: str) -> GateContext:
    """A context without a worker: the oracle side of a verification only."""
    program = load_reference(reference)
    oracle = Oracle(program, torch.device(device))
    if device == "meta":
        oracle._repeatable_checked = True  # the repeat check compares values: meta has none
    return GateContext(
        contract=contract_for(program), oracle=oracle, session=None, seed=0, replay=[]
    )


def _host_case(ctx: GateContext, seed: int) -> Case:
    """A case with host values (a draw on meta would have none to bring to the host)."""
    return Case("normal", seed, ctx.oracle.program.inputs(seed=seed))


def _reference(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "reference.py"
    path.write_text(source)
    return path


# -- CPU -------------------------------------------------------------------------------------
def test_run_copies_clones_only_what_a_cast_leaves_on_a_device() -> None:
    meta = torch.device("meta")
    f64, f32 = torch.empty(3, dtype=torch.float64, device=meta), torch.empty(3, device=meta)
    ints = torch.empty(3, dtype=torch.int64, device=meta)
    out = run_copies([f64, (f32, ints), 7], torch.float64, meta)
    assert out[0] is not f64 and out[0].dtype == torch.float64 and out[0].device == meta
    assert out[1][0].dtype == torch.float64 and out[1][1] is not ints and out[2] == 7
    assert run_copies([f64], None, meta)[0] is not f64
    host = [torch.zeros(3, dtype=torch.float64), torch.zeros(3, dtype=torch.int64)]
    same = run_copies(host, torch.float64, torch.device("cpu"))  # the CPU path: as before
    assert same[0] is host[0] and same[1] is host[1]


@pytest.mark.parametrize("reference", [RELU, SOFTMAX / "reference.py"], ids=["relu", "softmax"])
def test_each_input_crosses_once_per_case(monkeypatch: pytest.MonkeyPatch, reference: Path) -> None:
    """The float64 evaluation, the native run and the magnitude run (softmax's order model
    reads it) all read the case's one device copy: one upload a tensor input, made at the
    first run; with the switch at 0 each run uploads it again, as before."""
    monkeypatch.delenv(INPUTS_ON_DEVICE_ENV, raising=False)
    uploads = _Uploads(monkeypatch)
    ctx = _context(reference, "meta")
    case = _host_case(ctx, 1)
    uploads.by_storage.clear()  # (addresses of tensors freed before the case's are reused)
    expected = ctx.expected(case)
    ctx.native(case)
    magnitudes, _ = ctx.magnitude(case)
    runs = 2 + bool(magnitudes)
    assert expected[0].device.type == "meta"
    assert uploads.of(case.values) == [1] * len(uploads.of(case.values))
    copy = ctx.oracle_inputs(case)
    assert copy is not case.values and all(v.device.type == "meta" for v in copy)
    assert ctx.oracle_inputs(case) is copy  # held: the same copy for the case's later runs
    assert ctx.device_input_bytes_held() == base._tensor_bytes(case.values) > 0

    monkeypatch.setenv(INPUTS_ON_DEVICE_ENV, "0")
    ctx = _context(reference, "meta")
    case = _host_case(ctx, 1)
    uploads.by_storage.clear()
    ctx.expected(case), ctx.native(case), ctx.magnitude(case)
    assert ctx.oracle_inputs(case) is case.values and ctx.device_input_bytes_held() == 0
    assert uploads.of(case.values) == [runs] * len(uploads.of(case.values))


def test_a_new_case_gets_a_copy_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keyed like the results, by the admitted values list: a gate that replaces a case's
    values (a new list) gets a new copy, never the old one."""
    monkeypatch.delenv(INPUTS_ON_DEVICE_ENV, raising=False)
    ctx = _context(RELU, "meta")
    case = _host_case(ctx, 2)
    first = ctx.oracle_inputs(case)
    case.values = [v.clone() for v in case.values]
    second = ctx.oracle_inputs(case)
    assert second is not first and ctx.device_input_bytes_held() == 2 * base._tensor_bytes(
        case.values
    )


def test_no_run_writes_into_the_device_copy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A reference that writes into its float64 and integer inputs: every run (float64,
    native, index sources) reads a cast or a clone, so the copy's version
    counters (in-place writes) never move; the runs themselves did write (their outputs
    exist), just not there."""
    monkeypatch.delenv(INPUTS_ON_DEVICE_ENV, raising=False)
    ctx = _context(_reference(tmp_path, WRITES_INTO_INPUTS), "meta")
    case = _host_case(ctx, 3)
    copy = ctx.oracle_inputs(case)
    versions = [v._version for v in copy]
    ctx.expected(case)
    ctx.native(case)
    oracle = ctx.oracle
    oracle.op_inputs(copy, set())  # index sources: one more run each, float64 and native
    oracle.op_inputs(copy, set(), native=True)
    assert [v._version for v in copy] == versions
    assert ctx.oracle_inputs(case) is copy


def test_the_magnitude_run_never_writes_into_the_device_copy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``Oracle.magnitude`` casts through ``run_copies``: a float64 input is cloned."""
    seen: list[list[Any]] = []

    def recorded(model: Any, inputs64: list[Any], entry: Any) -> tuple[list[Any], int]:
        seen.append(inputs64)
        return [], 1

    import kernelgate.contract.match as match

    monkeypatch.setattr(match, "magnitude", recorded)
    monkeypatch.setattr("kernelgate.contract.library.entry", lambda name: name)
    ctx = _context(_reference(tmp_path, WRITES_INTO_INPUTS), "meta")
    copy = ctx.oracle_inputs(_host_case(ctx, 4))
    ctx.oracle.magnitude(copy, "x")
    assert seen[0][0] is not copy[0] and seen[0][1] is not copy[1]
    assert seen[0][0].dtype == torch.float64 and seen[0][1].dtype == torch.int64


def test_within_the_budget_the_least_recently_used_copy_goes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Room for one case's copy: the next case's copy takes the place of the older one's
    (which is uploaded again if asked again); a case whose inputs alone pass the budget
    reads the host values, and says why."""
    monkeypatch.delenv(INPUTS_ON_DEVICE_ENV, raising=False)
    ctx = _context(RELU, "meta")
    first, second = _host_case(ctx, 5), _host_case(ctx, 6)
    one = base._tensor_bytes(first.values)
    monkeypatch.setattr(base, "INPUTS_DEVICE_KEPT_BYTES", one)
    assert ctx.oracle_inputs(first) is not first.values
    assert ctx.oracle_inputs(second) is not second.values
    assert ctx._results[id(first.values)].device_inputs is None
    assert ctx._results[id(first.values)].inputs_on_host is None  # let go, not refused
    assert ctx.device_input_bytes_held() == one
    assert ctx.oracle_inputs(first) is not first.values  # again: the second's copy goes
    assert ctx._results[id(second.values)].device_inputs is None
    assert ctx.evaluations == Counter()  # a copy is not an evaluation

    monkeypatch.setattr(base, "INPUTS_DEVICE_KEPT_BYTES", one - 1)
    large = _host_case(ctx, 7)
    assert ctx.oracle_inputs(large) is large.values
    assert "over the device budget" in ctx._results[id(large.values)].inputs_on_host


def test_copies_leave_what_is_carried_between_gates_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The copies are not counted in RESULTS_KEPT_BYTES (the host values are): a case's
    byte count is the same with and without its copy."""
    monkeypatch.delenv(INPUTS_ON_DEVICE_ENV, raising=False)
    ctx = _context(RELU, "meta")
    case = _host_case(ctx, 8)
    ctx.expected(case)
    assert ctx._results[id(case.values)].nbytes == base._tensor_bytes(case.values)


def test_a_spill_lets_the_copies_go_and_the_case_reads_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The device out of memory: every copy is let go (the host holds the same values), the
    spill says something was freed even with results kept on the host, and the case's later
    runs read the host values; a new case gets a copy again."""
    monkeypatch.delenv(INPUTS_ON_DEVICE_ENV, raising=False)
    monkeypatch.setenv(fp64.RESULTS_ON_DEVICE_ENV, "0")
    ctx = _context(RELU, "meta")
    case = _host_case(ctx, 7)
    ctx.oracle_inputs(case)
    assert ctx.spill("the device was out of memory") is True
    held = ctx._results[id(case.values)]
    assert held.device_inputs is None and ctx.device_input_bytes_held() == 0
    assert "out of memory" in held.inputs_on_host
    assert ctx.oracle_inputs(case) is case.values
    assert ctx.spill("again") is False  # nothing left to let go
    later = _host_case(ctx, 8)
    assert ctx.oracle_inputs(later) is not later.values


def test_an_out_of_memory_upload_is_evaluated_again_from_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The copy's own upload runs the device out of memory inside an evaluation, with
    another case's copy held: that one is let go and the evaluation is made again from the
    host values."""
    monkeypatch.delenv(INPUTS_ON_DEVICE_ENV, raising=False)
    ctx = _context(RELU, "meta")
    held_case, case = _host_case(ctx, 9), _host_case(ctx, 10)
    ctx.oracle_inputs(held_case)
    original, raised = base.cast_values, []

    def short(value: Any, dtype: Any, device: torch.device) -> Any:
        if not raised:
            raised.append(True)
            raise torch.OutOfMemoryError("out of memory (test)")
        return original(value, dtype, device)

    monkeypatch.setattr(base, "cast_values", short)
    assert ctx.expected(case)[0].device.type == "meta"
    assert raised and ctx.oracle_inputs(case) is case.values
    assert ctx.device_input_bytes_held() == 0


def test_a_probe_short_of_memory_runs_again_from_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """EXC-01's refined probe edits the inputs where the copy lies; the device out of memory
    there: results and copies are let go and the probe runs again on the host values (the
    probe's arithmetic itself is tested on values, test_oracle and the GPU tests)."""
    from kernelgate.oracle import dependence

    monkeypatch.delenv(INPUTS_ON_DEVICE_ENV, raising=False)
    monkeypatch.delenv(fp64.RESULTS_ON_DEVICE_ENV, raising=False)

    def stand_in(tensor: torch.Tensor) -> torch.Tensor:  # meta has no values to copy
        return torch.empty(tensor.shape, dtype=tensor.dtype)

    monkeypatch.setattr(base, "to_host", stand_in)  # (meta results count no bytes: kept)
    monkeypatch.setattr(dependence, "coarse_probe", lambda values, expected, oracle: oracle)
    seen: list[str] = []

    def refined(values: list[Any], expected: Any, index: int, disputed: Any, fallback: Any) -> Any:
        seen.append(values[0].device.type)
        if len(seen) == 1:
            raise torch.OutOfMemoryError("out of memory (test)")
        return fallback

    monkeypatch.setattr(dependence, "refined_probe", refined)
    ctx = _context(RELU, "meta")
    case = _host_case(ctx, 14)
    case.values[0].view(-1)[0] = float("inf")
    found = ctx.refined_dependence_probe(case, 0, torch.zeros(1, dtype=torch.bool))
    assert seen == ["meta", "cpu"] and found is not None
    assert ctx.device_input_bytes_held() == 0
    assert "out of memory" in ctx._results[id(case.values)].inputs_on_host


def test_the_cpu_honest_run_is_kept_on_the_device_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``cpu-fp32`` (the ensemble's second implementation, asked on a device) runs on the
    host values and its results are uploaded once, kept with the case's results (within
    their budget), not uploaded again for each judgement that reads them."""
    monkeypatch.delenv(INPUTS_ON_DEVICE_ENV, raising=False)
    monkeypatch.delenv(fp64.RESULTS_ON_DEVICE_ENV, raising=False)
    ctx = _context(RELU, "meta")
    case = _host_case(ctx, 11)
    runs = ctx.honest(case, independent=True)
    assert set(runs) == {"native-eager", "cpu-fp32"}
    assert all(t.device.type == "meta" for t in runs["cpu-fp32"])
    again = ctx.honest(case, independent=True)
    assert again["cpu-fp32"] is runs["cpu-fp32"]
    assert ctx.evaluations["honest:cpu-fp32"] == 1


def test_a_cpu_honest_run_that_does_not_fit_stays_on_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Over the results' device budget, or with the device out of memory for its upload,
    the CPU run's results stay on the host where they were computed (nothing is brought
    down), and the case's assessments say which and why (``oracle_results_held``)."""
    monkeypatch.delenv(fp64.RESULTS_ON_DEVICE_ENV, raising=False)
    monkeypatch.setattr(base, "RESULTS_DEVICE_KEPT_BYTES", 0)
    ctx = _context(RELU, "meta")
    case = _host_case(ctx, 12)
    run = ctx.honest(case, independent=True)["cpu-fp32"]
    assert all(t.device.type == "cpu" for t in run)
    assert "over the device budget" in ctx.held_on_host(case)["honest:cpu-fp32"]

    monkeypatch.setattr(base, "RESULTS_DEVICE_KEPT_BYTES", 1 << 30)

    def short(value: Any, device: torch.device) -> Any:
        raise torch.OutOfMemoryError("out of memory (test)")

    monkeypatch.setattr(base, "held_on", short)
    ctx = _context(RELU, "meta")
    case = _host_case(ctx, 13)
    run = ctx.honest(case, independent=True)["cpu-fp32"]
    assert all(t.device.type == "cpu" for t in run)
    assert "out of memory" in ctx.held_on_host(case)["honest:cpu-fp32"]


def test_the_cpu_path_is_unchanged(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An oracle on the CPU: no copy, no upload, the runs read the values themselves (a
    float64 input reaches the reference as the very tensor, as before), spill has nothing to
    let go, the CPU honest run's results are the run's own tensors."""
    monkeypatch.delenv(INPUTS_ON_DEVICE_ENV, raising=False)
    uploads = _Uploads(monkeypatch)
    ctx = _context(SOFTMAX / "reference.py", "cpu")
    case = ctx.drawn_case("normal", 1)
    uploads.by_storage.clear()
    assert ctx.oracle_inputs(case) is case.values
    ctx.expected(case), ctx.native(case), ctx.magnitude(case), ctx.honest(case, independent=True)
    assert not uploads.by_storage and ctx.device_input_bytes_held() == 0
    held = ctx._results[id(case.values)]
    assert held.device_inputs is None and held.inputs_on_host is None
    assert held.nbytes == base._tensor_bytes([case.values, list(held.entries.values())])
    assert ctx.spill("test") is False and held.inputs_on_host is None

    seen: list[torch.Tensor] = []
    writes = _context(_reference(tmp_path, WRITES_INTO_INPUTS), "cpu")
    writes_case = _host_case(writes, 1)
    monkeypatch.setattr(writes.oracle.model64, "forward", lambda x, k: seen.append(x) or [x * k])
    writes.expected(writes_case)
    assert seen[0] is writes_case.values[0]


# -- GPU -------------------------------------------------------------------------------------
def _judged(ctx: GateContext, seed: int) -> tuple[Case, list[Assessment]]:
    """A case judged with the exact output and with one position wrong (the native and, on
    an order model, the magnitude runs are made), the outputs on the device."""
    case = ctx.drawn_case("normal", seed)
    exact = ctx.expected(case)[0].to("cuda", torch.float32)
    wrong = exact.clone()
    wrong.view(-1)[7] += 1.0
    return case, [ctx.assess(case, 0, exact), ctx.assess(case, 0, wrong)]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("reference", [RELU, SOFTMAX / "reference.py"], ids=["relu", "softmax"])
def test_on_cuda_each_input_crosses_once_and_judges_alike(
    monkeypatch: pytest.MonkeyPatch, reference: Path
) -> None:
    monkeypatch.delenv(INPUTS_ON_DEVICE_ENV, raising=False)
    uploads = _Uploads(monkeypatch)
    ctx = _context(reference, "cuda")
    uploads.by_storage.clear()
    case, judged = _judged(ctx, 1)
    assert ctx.evaluations["expected"] == ctx.evaluations["honest:native-eager"] == 1
    assert uploads.of(case.values) == [1] * len(case.values)
    copy = ctx.oracle_inputs(case)
    for host, device in zip(case.values, copy, strict=True):
        assert device.device.type == "cuda" and torch.equal(device.cpu(), host)

    monkeypatch.setenv(INPUTS_ON_DEVICE_ENV, "0")
    plain = _context(reference, "cuda")
    uploads.by_storage.clear()
    plain_case, baseline = _judged(plain, 1)
    assert uploads.of(plain_case.values) == [sum(plain.evaluations.values())] * len(case.values)
    assert [a.passed for a in judged] == [True, False]
    for a, b in zip(judged, baseline, strict=True):
        assert_same_assessment(a, b)


@pytest.mark.gpu
@needs_cuda
def test_on_cuda_a_reference_that_writes_into_its_inputs_leaves_the_copy_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Float64, native, open-sign and index-source runs of a reference that writes into
    its inputs: the copy keeps the host values, the results are those of the host values,
    and each input crossed once."""
    monkeypatch.delenv(INPUTS_ON_DEVICE_ENV, raising=False)
    uploads = _Uploads(monkeypatch)
    ctx = _context(_reference(tmp_path, WRITES_INTO_INPUTS), "cuda")
    case = ctx.admit(_host_case(ctx, 1))
    host = [v.clone() for v in case.values]
    uploads.by_storage.clear()
    expected = ctx.expected(case)[0]
    native = ctx.native(case)[0]
    ctx.open_zero_signs(case)
    copy = ctx.oracle_inputs(case)
    ctx.oracle.op_inputs(copy, set())
    assert uploads.of(case.values) == [1, 1]
    for kept, original in zip(copy, host, strict=True):
        assert torch.equal(kept.cpu(), original)
    assert all(torch.equal(v, h) for v, h in zip(case.values, host, strict=True))
    want = (host[0] * 2) * (host[1] + 1)
    torch.testing.assert_close(expected.cpu(), want, rtol=0, atol=0)
    torch.testing.assert_close(native.cpu(), want, rtol=0, atol=0)
    assert torch.equal(ctx.expected(case)[0], expected)  # a second ask: the cached result


@pytest.mark.gpu
@needs_cuda
def test_on_cuda_dependence_probes_alike_with_and_without_the_copy(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """EXC-01's coarse and refined probes edit the device copy's values (never the copy):
    the same probes as from the host values, and the copy unchanged."""
    from .test_oracle import MASKED_ROW_SUM

    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(1))
    x[0, 1], x[0, 5] = float("inf"), float("nan")
    disputed = torch.zeros(4, 6, dtype=torch.bool, device="cuda")
    disputed[0, 1:] = True
    reference = _reference(tmp_path, MASKED_ROW_SUM)
    probes = []
    for switch in ("1", "0"):
        monkeypatch.setenv(INPUTS_ON_DEVICE_ENV, switch)
        ctx = _context(reference, "cuda")
        case = Case("normal", 0, [x.clone()])
        coarse = ctx.dependence_probe(case)[0]
        refined = ctx.refined_dependence_probe(case, 0, disputed)[0]
        probes.append((coarse.cpu(), refined.cpu()))
        copy = ctx.oracle_inputs(case)
        assert (copy is case.values) == (switch == "0")
        assert torch.equal(copy[0].cpu().nan_to_num(), x.nan_to_num())  # edited: never
        assert torch.equal(copy[0].cpu().isnan(), x.isnan())
    for with_copy, without in zip(*probes, strict=True):
        # the same inputs edited the same way, on the device or uploaded: the same runs
        torch.testing.assert_close(with_copy, without, rtol=0, atol=0, equal_nan=True)


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("pair", PAIRS, ids=lambda p: f"{p[0].stem}-{p[1].stem}")
def test_a_verification_with_the_copy_gives_the_same_verdict(
    monkeypatch: pytest.MonkeyPatch, pair: tuple[Path, Path]
) -> None:
    """Whole verifications on CUDA (worker, IPC): the verdict, every gate's status and
    reason are those of ``KERNELGATE_INPUTS_ON_DEVICE=0``, and no more host tensors are
    uploaded with the copies than without them."""
    reference, candidate = pair
    uploads = _Uploads(monkeypatch)
    monkeypatch.delenv(INPUTS_ON_DEVICE_ENV, raising=False)
    with_copy = kernelgate.verify(reference, candidate, device="cuda", timeout=60)
    counted = sum(uploads.by_storage.values())
    uploads.by_storage.clear()
    monkeypatch.setenv(INPUTS_ON_DEVICE_ENV, "0")
    without = kernelgate.verify(reference, candidate, device="cuda", timeout=60)
    assert counted <= sum(uploads.by_storage.values())
    assert_same_judgement(with_copy, without)
