"""The device-resident data path on a GPU (sandbox/cuda_ipc.py): the same bytes as the
pipe, copies the judge owns, hostile references refused, MEM-01 unchanged."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import kernelgate
from kernelgate.demo import intended_gates
from kernelgate.gates.base import Status
from kernelgate.inputs.placement import GUARD_BYTES, PlacedTensor
from kernelgate.sandbox import cuda_ipc, wire
from kernelgate.sandbox.session import ExecutionIncident, WorkerSession

from .conftest import SOFTMAX

pytestmark = pytest.mark.gpu

# Writes its input's guard band, an output past its end and a fresh allocation, so that
# every kind of storage crosses (outputs, inputs after, guarded allocations).
SCRIBBLER = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        scratch = torch.empty(1000, device=x.device)
        scratch.fill_(3.0)
        out = torch.empty_like(x)
        torch.mul(x, 3.0, out=out)
        out += scratch[:1].sum()
        return out, x[1:].clone(), 7
"""

# Starts a thread that keeps overwriting what it returned and its input storage.
OVERWRITER = """
import threading, time
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        out = x * 2
        stream = torch.cuda.Stream()
        def scribble():
            with torch.cuda.stream(stream):
                end = time.monotonic() + 3
                while time.monotonic() < end:
                    out.fill_(-1.0)
                    x.fill_(-2.0)
                    torch.cuda.synchronize()
        threading.Thread(target=scribble, daemon=True).start()
        return out
"""

# Forges the worker's reply: a reference to its own memory, bent as the test says.
FORGER = """
import sys, time
import torch
import torch.nn as nn
from kernelgate.sandbox import cuda_ipc, wire

BEND = {bend!r}

class ModelNew(nn.Module):
    def forward(self, x):
        mine = torch.ones(1024, device=x.device)
        torch.cuda.synchronize()
        ref = cuda_ipc.Exports(x.device).export(mine.untyped_storage(), snapshot=False)
        node = {{"t": "tensor", "dtype": "float32", "shape": [4], "stride": [1], "offset": 0,
                "address": mine.data_ptr()}} | ref.to_node() | BEND
        wire.send_frame(int(sys.argv[2]), {{"ok": True, "outputs": node, "inputs_after": [],
                                          "allocations": []}})
        time.sleep(60)
"""


def session_for(tmp_path: Path, source: str, *, pipe: bool = False) -> Iterator[WorkerSession]:
    path = tmp_path / "candidate.py"
    path.write_text(source)
    with pytest.MonkeyPatch.context() as patch:
        if pipe:
            patch.setenv(cuda_ipc.ENV_SWITCH, "pipe")
        else:
            patch.delenv(cuda_ipc.ENV_SWITCH, raising=False)
        with WorkerSession(path, [], device="cuda", timeout=60) as session:
            yield session


def placed_input(numel: int = 1 << 16, device: str | None = None) -> PlacedTensor:
    values = torch.randn(numel, generator=torch.Generator().manual_seed(0))
    return PlacedTensor.place(values, device=device)


def host_bytes(value: wire.WireTensor) -> bytes:
    return value.storage.view(torch.uint8).cpu().numpy().tobytes()


def everything(result: Any) -> list[Any]:
    """Every storage a call brought back, as host bytes, beside the scalars."""
    outputs = [host_bytes(o) if isinstance(o, wire.WireTensor) else o for o in result.outputs]
    after = [host_bytes(t) for t in result.inputs_after]
    allocations = [(host_bytes(t), g, e) for t, g, e in result.allocations]
    return [outputs, after, allocations]


def test_every_storage_is_bit_for_bit_the_same_through_ipc_and_pipes(tmp_path: Path) -> None:
    x = placed_input()
    results = {}
    for pipe in (True, False):
        for session in session_for(tmp_path, SCRIBBLER, pipe=pipe):
            result = session.call([x.as_wire()], poison=0xFF, guard_bytes=GUARD_BYTES)
            results[session.data_path] = (result, everything(result))
    assert set(results) == {"pipe", "cuda-ipc"}
    by_pipe, by_ipc = results["pipe"], results["cuda-ipc"]
    assert by_pipe[1] == by_ipc[1]
    assert by_ipc[0].outputs[0].storage.device.type == "cuda"
    assert by_pipe[0].outputs[0].storage.device.type == "cpu"
    assert len(by_ipc[0].allocations) >= 2  # scratch and out, with their guard bands
    assert by_ipc[0].outputs[2] == 7


@pytest.mark.parametrize("placed_on", [None, "cuda"], ids=["host", "device"])
def test_a_thread_that_overwrites_after_returning_changes_nothing_the_judge_holds(
    tmp_path: Path, placed_on: str | None
) -> None:
    x = placed_input(device=placed_on)
    pristine = x.storage.clone()
    for session in session_for(tmp_path, OVERWRITER):
        assert session.data_path == "cuda-ipc", session.data_path_note
        result = session.call([x.as_wire()], poison=0xFF, guard_bytes=GUARD_BYTES)
        held = [host_bytes(result.outputs), [host_bytes(t) for t in result.inputs_after]]
        time.sleep(1.0)  # the thread goes on writing in the worker
        assert held == [host_bytes(result.outputs), [host_bytes(t) for t in result.inputs_after]]
        # bit for bit (the guard bands hold NaN poison, which torch.equal never calls equal)
        assert torch.equal(x.storage.view(torch.uint8), pristine.view(torch.uint8))


@pytest.mark.parametrize(
    "bend",
    [
        {"nbytes": 1 << 30, "shape": [1 << 28]},  # far past the allocation
        {"ipc_offset": 1 << 40},
        {"ipc_offset": -4},
        {"ipc": "ab" * 64},  # a handle of nothing
        {"ipc": "00" * 63},
    ],
    ids=["size", "offset", "negative", "garbage-handle", "short-handle"],
)
def test_a_hostile_reference_is_a_protocol_incident_and_the_judge_goes_on(
    tmp_path: Path, bend: dict[str, Any]
) -> None:
    for session in session_for(tmp_path, FORGER.format(bend=bend)):
        assert session.data_path == "cuda-ipc", session.data_path_note
        with pytest.raises(ExecutionIncident) as raised:
            session.call([placed_input().as_wire()], poison=0xFF, guard_bytes=GUARD_BYTES)
        assert raised.value.kind == "protocol", raised.value
        assert not session.alive  # the forger was killed
    # the judge's own device context is intact
    assert float(torch.ones(4, device="cuda").sum()) == 4.0


def test_the_forger_unbent_is_read_as_sent(tmp_path: Path) -> None:
    """The forged reply itself is well formed: only the bends above make it an incident."""
    for session in session_for(tmp_path, FORGER.format(bend={})):
        result = session.call([placed_input().as_wire()], poison=0xFF, guard_bytes=GUARD_BYTES)
        assert torch.equal(result.outputs.view().cpu(), torch.ones(4))


WRITES_INPUT = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.softmax(x, dim=1)
        x.mul_(2.0)
        return out
"""

WRITES_GUARD = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        out.copy_(torch.softmax(x, dim=1))
        past = out.as_strided((out.numel() + 1,), (1,), out.storage_offset())
        past[-1:].fill_(0.0)
        return out
"""


@pytest.mark.parametrize(
    "source, problem",
    [(WRITES_INPUT, "was modified"), (WRITES_GUARD, "guard band")],
    ids=["input-write", "guard-write"],
)
def test_mem01_sees_writes_through_the_ipc_path(tmp_path: Path, source: str, problem: str) -> None:
    candidate = tmp_path / "candidate.py"
    candidate.write_text(source)
    verdict = kernelgate.verify(
        SOFTMAX / "reference.py", candidate, device="cuda", only=intended_gates("MEM-01")
    )
    assert verdict.environment["data_path"] == {"path": "cuda-ipc"}
    mem01 = verdict.gate("MEM-01")
    assert mem01.status is Status.FAIL and problem in mem01.reason, mem01.reason


def test_the_honest_softmax_is_verified_over_ipc() -> None:
    verdict = kernelgate.verify(SOFTMAX / "reference.py", SOFTMAX / "honest.py", device="cuda")
    assert verdict.environment["data_path"] == {"path": "cuda-ipc"}
    assert verdict.verdict.value == "verified", [(g.id, g.reason) for g in verdict.gates]


def test_the_judge_places_its_inputs_on_the_device_on_the_ipc_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Placement on the device (no host fill or copy), and the gates that compare what was
    sent with what came back (MEM-01, CMP-02's layouts) still judge the honest softmax."""
    devices: list[str] = []
    place = PlacedTensor.place.__func__  # type: ignore[attr-defined]

    def recording(cls: type, values: torch.Tensor, **kwargs: Any) -> PlacedTensor:
        placed = place(cls, values, **kwargs)
        devices.append(placed.storage.device.type)
        return placed

    monkeypatch.setattr(PlacedTensor, "place", classmethod(recording))
    verdict = kernelgate.verify(
        SOFTMAX / "reference.py",
        SOFTMAX / "honest.py",
        device="cuda",
        only=["CMP-01", "CMP-02", "MEM-01"],
    )
    assert verdict.environment["data_path"] == {"path": "cuda-ipc"}
    assert devices and set(devices) == {"cuda"}, devices
    for gate in ("CMP-01", "CMP-02", "MEM-01"):
        assert verdict.gate(gate).status is Status.PASS, verdict.gate(gate).reason
