"""ORD-02's outputs reused across calls: the worker keeps earlier outputs alive, re-reads them
after later calls, and the gate compares their bytes and storages (issue 17, item 3)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

import kernelgate
from kernelgate.contract.derive import contract_for
from kernelgate.formats.kernelbench import load_reference
from kernelgate.gates.base import GateContext, Status, run_gate
from kernelgate.gates.ord02_determinism import (
    KEPT_WINDOWS,
    SEQUENCE,
    DeterminismGate,
    inputs_written_over,
    kept_windows,
)
from kernelgate.inputs.placement import GUARD_BYTES, POISONS, PlacedTensor
from kernelgate.oracle.fp64 import Oracle
from kernelgate.redteam.catalog import ROOT as REDTEAM
from kernelgate.sandbox.session import ExecutionIncident, WorkerSession
from kernelgate.sandbox.worker import MAX_KEPT

VECTOR_ADD = REDTEAM / "references" / "vector_add.py"
SOFTMAX = REDTEAM / "references" / "softmax.py"

# Plain PyTorch candidates of vector_add (no Triton: the interpreter adds nothing here).
STATIC = """
    class ModelNew(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.out = None

        def forward(self, a, b):
            if self.out is None or self.out.shape != a.shape:
                self.out = torch.empty_like(a)
            return torch.add(a, b, out=self.out)  # one buffer for every caller
"""
HONEST = """
    class ModelNew(torch.nn.Module):
        def forward(self, a, b):
            return a + b
"""
# Returns fresh storage, but uses the caller's previous result as scratch on the next call.
SCRATCH_IN_LAST_OUTPUT = """
    class ModelNew(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.last = None

        def forward(self, a, b):
            if self.last is not None and self.last.shape == a.shape:
                torch.mul(a, b, out=self.last)
            self.last = a + b
            return self.last
"""
# Honest, but raises on its third call (ORD-02's first call of input B).
RAISES_ON_THIRD_CALL = """
    class ModelNew(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.calls = 0

        def forward(self, a, b):
            self.calls += 1
            if self.calls == 3:
                raise RuntimeError("third call")
            return a + b
"""


def _candidate(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text("import torch\n" + textwrap.dedent(body))
    return path


def _call(session: WorkerSession, a: torch.Tensor, b: torch.Tensor):
    wire_inputs = [PlacedTensor.place(v).as_wire() for v in (a, b)]
    return session.call(wire_inputs, poison=POISONS[0], guard_bytes=GUARD_BYTES)


def test_kept_outputs_are_read_back_as_they_are_now_and_released(tmp_path: Path) -> None:
    """The worker keeps a call's outputs under a name, reads their current bytes and
    storage address back on request, and forgets them all on release."""
    a1, b1, a2, b2 = (torch.randn(64) for _ in range(4))
    seen = {}
    for name, body in (("static", STATIC), ("honest", HONEST)):
        with WorkerSession(_candidate(tmp_path, name, body), [], timeout=60) as session:
            with session.keeping_outputs("first"):
                first = _call(session, a1, b1).outputs
            second = _call(session, a2, b2).outputs  # not kept
            kept = session.kept_outputs(["first"])["first"]
            session.release_kept()
            with pytest.raises(ExecutionIncident, match="no outputs kept"):
                session.kept_outputs(["first"])
            assert session.alive  # a refused request is not a crash
            seen[name] = (first, second, kept)
    first, second, kept = seen["static"]
    assert torch.equal(first.view(), a1 + b1)  # right when returned ...
    assert torch.equal(kept.view(), a2 + b2)  # ... and overwritten by the next call
    assert kept.address == first.address == second.address
    first, second, kept = seen["honest"]
    assert torch.equal(kept.view(), a1 + b1)
    assert kept.address == first.address != second.address
    assert kept.nbytes == first.nbytes > 0


def test_the_worker_keeps_at_most_max_kept_calls(tmp_path: Path) -> None:
    x = torch.randn(8)
    with WorkerSession(_candidate(tmp_path, "honest", HONEST), [], timeout=60) as session:
        for i in range(MAX_KEPT):
            with session.keeping_outputs(f"call {i}"):
                _call(session, x, x)
        with session.keeping_outputs("one too many"), pytest.raises(ExecutionIncident):
            _call(session, x, x)
        with session.keeping_outputs("call 0"):  # replacing a kept name is allowed
            _call(session, x, x)
        assert len(session.kept_outputs([f"call {i}" for i in range(MAX_KEPT)])) == MAX_KEPT


def test_the_worker_forgets_only_the_kept_outputs_it_is_told_to(tmp_path: Path) -> None:
    x = torch.randn(8)
    with WorkerSession(_candidate(tmp_path, "honest", HONEST), [], timeout=60) as session:
        for name in ("call 0", "call 1"):
            with session.keeping_outputs(name):
                _call(session, x, x)
        session.forget_kept(["call 0"])
        assert list(session.kept_outputs(["call 1"])) == ["call 1"]
        with pytest.raises(ExecutionIncident, match="no outputs kept"):
            session.kept_outputs(["call 0"])


def test_ord02_rejects_a_static_output_buffer_and_names_the_calls() -> None:
    verdict = kernelgate.verify(
        VECTOR_ADD, REDTEAM / "defects" / "static_output_buffer.py", only=["ORD-02"]
    )
    gate = verdict.gate("ORD-02")
    assert gate.status is Status.FAIL
    assert "call 1 shares storage with output 0 of call 0" in gate.reason
    finding = gate.counterexample.findings[0]
    assert (finding["call"], finding["kept_call"]) == (1, 0)
    assert finding["storage"]["address"] == finding["kept_storage"]["address"]
    assert verdict.gate("RES-01").status is Status.PASS  # a judgement, not an incident


def test_ord02_rejects_a_candidate_that_writes_into_a_returned_output(tmp_path: Path) -> None:
    """Fresh storage every call, but the previous result is used as scratch: the kept output
    of call 0 no longer holds what it was returned with after call 1."""
    candidate = _candidate(tmp_path, "scratch", SCRATCH_IN_LAST_OUTPUT)
    gate = kernelgate.verify(VECTOR_ADD, candidate, only=["ORD-02"]).gate("ORD-02")
    assert gate.status is Status.FAIL
    assert gate.reason.startswith("output 0 of call 0 changed after call 1")
    findings = gate.counterexample.findings
    assert findings and all(f["changed_call"] == 0 and f["after_call"] == 1 for f in findings)
    first = findings[0]
    assert first["returned_by_call_0"] != first["after_call_1"]
    assert len(first["output_position"]) == 1


@pytest.mark.parametrize(
    ("reference", "candidate"),
    [(VECTOR_ADD, "controls/vector_add.py"), (SOFTMAX, "controls/workspace_reused.py")],
    ids=["vector_add", "workspace_reused"],
)
def test_ord02_passes_fresh_outputs_and_reused_scratch(reference: Path, candidate: str) -> None:
    gate = kernelgate.verify(reference, REDTEAM / candidate, only=["ORD-02"]).gate("ORD-02")
    assert gate.status is Status.PASS, gate.reason
    assert gate.evidence["kept_calls"] == {
        str(c): f"through call {last}" for c, last in KEPT_WINDOWS.items()
    }


@pytest.mark.parametrize("in_place", [False, True])
def test_kept_calls_hold_each_inputs_first_result_and_at_most_two_at_once(in_place: bool) -> None:
    """The first call of each input is kept; at most two outputs are held during any call;
    a call whose inputs a later call overwrites is kept exactly where no input is written
    in place (there an honest output may be a view of its input)."""
    windows = kept_windows(in_place)
    names = [name for name, _, _ in SEQUENCE]
    assert {names.index(n) for n in set(names)} <= set(windows)
    for call in range(len(SEQUENCE)):
        held = [c for c, last in windows.items() if c <= call <= last]
        assert len(held) <= 2, (call, held)
    overwritten = {inputs_written_over(c) for c in range(len(SEQUENCE))} - {None}
    assert overwritten, "no call writes its inputs into an earlier call's storages"
    for call in overwritten:
        writer = call + 1
        if in_place:
            assert call not in windows
        else:  # kept through the call that overwrites its inputs, and re-read after it
            assert call in windows and windows[call] >= writer


def test_ord02_rejects_an_output_that_is_computed_when_it_is_read() -> None:
    """A lazy output (a tensor subclass holding the caller's input) reads right at once;
    once the next call's inputs are written into its input buffers, it reads otherwise."""
    gate = kernelgate.verify(SOFTMAX, REDTEAM / "defects" / "lazy_output.py", only=["ORD-02"]).gate(
        "ORD-02"
    )
    assert gate.status is Status.FAIL
    writer = next(c for c in range(len(SEQUENCE)) if inputs_written_over(c) is not None)
    earlier = inputs_written_over(writer)
    assert gate.reason.startswith(f"output 0 of call {earlier} changed after call {writer}")
    assert "computed when read" in gate.reason
    findings = gate.counterexample.findings
    assert findings and all(
        (f["changed_call"], f["after_call"]) == (earlier, writer) for f in findings
    )


@pytest.mark.parametrize(
    ("body", "status"),
    [(HONEST, Status.PASS), (STATIC, Status.FAIL), (RAISES_ON_THIRD_CALL, Status.SKIPPED)],
    ids=["passed", "failed", "aborted"],
)
def test_the_worker_holds_no_output_after_the_gate(tmp_path: Path, body: str, status) -> None:
    """However ORD-02 ends (pass, fail, or aborted by an incident), it releases what it kept."""
    program = load_reference(VECTOR_ADD)
    candidate = _candidate(tmp_path, "candidate", body)
    with WorkerSession(candidate, program.init_inputs(), timeout=60) as session:
        ctx = GateContext(
            contract=contract_for(program),
            oracle=Oracle(program),
            session=session,
            seed=0,
            replay=[],
        )
        result = run_gate(DeterminismGate(), ctx)
        assert result.status is status, result.reason
        assert session.alive
        for call in KEPT_WINDOWS:
            with pytest.raises(ExecutionIncident, match="no outputs kept"):
                session.kept_outputs([f"call {call}"])
    assert [i.detail for i in ctx.incidents] == (
        ["RuntimeError: third call"] if status is Status.SKIPPED else []
    )


@pytest.mark.gpu
def test_ord02_rejects_a_replayed_cuda_graphs_static_output() -> None:
    verdict = kernelgate.verify(
        SOFTMAX,
        REDTEAM / "defects" / "cuda_graph_static_output.py",
        device="cuda",
        timeout=60,
        only=["ORD-02"],
    )
    gate = verdict.gate("ORD-02")
    assert gate.status is Status.FAIL, gate.reason
    assert "shares storage" in gate.reason
    assert gate.counterexample.findings[0]["kept_call"] == 0
    assert verdict.gate("RES-01").status is Status.PASS, verdict.gate("RES-01").reason


@pytest.mark.gpu
def test_gpu_outputs_reused_red_team_and_control() -> None:
    """On the device, through every gate: the four reuse defects rejected by ORD-02 (the
    CUDA graph one exists only there), the workspace control verified."""
    from kernelgate.redteam.runner import CAUGHT, PASSED, calibrate

    names = [
        "static_output_buffer",
        "cuda_graph_static_output",
        "previous_output_as_workspace",
        "lazy_output",
        "workspace_reused",
    ]
    cal = calibrate("cuda", names, jobs=1)
    outcomes = {r.name: (r.outcome, r.failure_reasons, r.detail) for r in cal.results}
    assert all(r.outcome == CAUGHT for r in cal.defects), outcomes
    assert [r.outcome for r in cal.controls] == [PASSED], outcomes


class _FreshStorage(torch.Tensor):
    """A lazy tensor subclass: every request for its storage materialises a fresh copy."""

    requests = 0

    def untyped_storage(self) -> torch.UntypedStorage:
        type(self).requests += 1
        return self.as_subclass(torch.Tensor).clone().untyped_storage()


def test_an_output_storage_is_asked_for_once_and_can_be_held() -> None:
    """Bytes and address come from the same storage, and the worker can keep that storage
    alive: a freed temporary's address handed to a later call would read as reuse (CUDA's
    caching allocator does hand it out again; a lazy matmul subclass in CUDA-L1 did this)."""
    from kernelgate.sandbox import wire

    value = torch.Tensor._make_subclass(_FreshStorage, torch.arange(6.0))
    blobs: list = []
    held: list[torch.UntypedStorage] = []
    _FreshStorage.requests = 0
    encoded = wire.encode_value([value, (value,)], blobs, held)
    assert _FreshStorage.requests == 2  # once per tensor sent, not once per field
    assert [e["address"] for e in (encoded["items"][0], encoded["items"][1]["items"][0])] == [
        s.data_ptr() for s in held
    ]
    assert all(bytes(b) == bytes(torch.arange(6.0).numpy()) for b in blobs)
