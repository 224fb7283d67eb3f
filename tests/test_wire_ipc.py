"""The IPC data path's checks that run without a GPU: what a hostile worker's IPC nodes may
look like and what the judge makes of them, the judge's mapping cache, and the decision to
fall back to the pipe (sandbox/cuda_ipc.py, wire.py, session.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from kernelgate.sandbox import cuda_ipc, wire
from kernelgate.sandbox.cuda_ipc import HANDLE_BYTES, IpcError, IpcRef, Mappings
from kernelgate.sandbox.session import WorkerSession

HANDLE = bytes(range(HANDLE_BYTES))


def ipc_node(**fields: Any) -> dict[str, Any]:
    """A tensor node as a worker sends it on the IPC path: 8 float32 in 32 bytes."""
    node = {
        "t": "tensor",
        "dtype": "float32",
        "shape": [8],
        "stride": [1],
        "offset": 0,
        "address": 4096,
        "ipc": HANDLE.hex(),
        "ipc_offset": 0,
        "nbytes": 32,
    }
    return node | fields


class FakeMemory:
    """Stands in for the driver and the device: allocations are CPU byte tensors, a handle
    names one of them, and every open and close is counted."""

    def __init__(self) -> None:
        self.allocations: dict[bytes, torch.Tensor] = {}
        self.bases: dict[int, torch.Tensor] = {}
        self.opened: list[bytes] = []
        self.closed: list[int] = []

    def add(self, handle: bytes, data: bytes) -> None:
        self.allocations[handle] = torch.tensor(list(data), dtype=torch.uint8)

    def open(self, handle: bytes) -> tuple[int, int]:
        if handle not in self.allocations:
            raise IpcError("cuIpcOpenMemHandle failed: CUDA_ERROR_INVALID_VALUE (1)")
        self.opened.append(handle)
        memory = self.allocations[handle]
        base = 1_000_000 * (len(self.opened))
        self.bases[base] = memory
        return base, memory.numel()

    def close(self, base: int) -> None:
        self.closed.append(base)

    def bytes_at(self, address: int, nbytes: int, device: torch.device) -> torch.Tensor:
        for base, memory in self.bases.items():
            if base <= address < base + memory.numel():
                start = address - base
                assert start + nbytes <= memory.numel(), "read past a fake allocation"
                return memory[start : start + nbytes]
        raise AssertionError("address in no fake allocation")


@pytest.fixture
def memory(monkeypatch: pytest.MonkeyPatch) -> FakeMemory:
    fake = FakeMemory()
    monkeypatch.setattr(cuda_ipc, "driver", lambda: fake)
    monkeypatch.setattr(cuda_ipc, "device_bytes", fake.bytes_at)
    return fake


# -- what a hostile worker's IPC node may hold ------------------------------------------------


@pytest.mark.parametrize(
    "fields, problem",
    [
        ({"ipc": "zz" * HANDLE_BYTES}, "hex"),
        ({"ipc": HANDLE.hex()[:-2]}, "hex"),  # 63 bytes
        ({"ipc": HANDLE.hex() + "00"}, "hex"),  # 65 bytes
        ({"ipc": HANDLE.hex().upper()}, "hex"),
        ({"ipc": 12345}, "hex"),
        ({"ipc": HANDLE.hex() + "\n"}, "hex"),
        ({"ipc_offset": -1}, "out of range"),
        ({"ipc_offset": 1 << 63}, "out of range"),
        ({"ipc_offset": 1.5}, "integers"),
        ({"ipc_offset": True}, "integers"),
        ({"nbytes": -32}, "out of range"),
        ({"nbytes": wire.MAX_BLOB_BYTES + 1}, "out of range"),
        ({"nbytes": "32"}, "integers"),
    ],
)
def test_malformed_ipc_nodes_are_wire_errors_before_anything_is_opened(
    memory: FakeMemory, fields: dict[str, Any], problem: str
) -> None:
    memory.add(HANDLE, bytes(32))
    reader = Mappings(torch.device("cpu"))
    with pytest.raises(wire.WireError, match=problem):
        wire.decode_value(ipc_node(**fields), [], reader.read)
    assert memory.opened == []


def test_an_ipc_node_on_the_pipe_path_is_malformed() -> None:
    with pytest.raises(wire.WireError, match="only bytes"):
        wire.decode_value(ipc_node(), [])


def test_a_size_that_is_no_whole_number_of_elements_is_refused(memory: FakeMemory) -> None:
    memory.add(HANDLE, bytes(64))
    with pytest.raises(wire.WireError, match="whole number"):
        wire.decode_value(ipc_node(nbytes=30), [], Mappings(torch.device("cpu")).read)
    assert memory.opened == []


@pytest.mark.parametrize(
    "offset, nbytes", [(0, 68), (40, 32), (64, 4), ((1 << 62) - 4, 32), (1 << 62, 4)]
)
def test_a_range_outside_the_opened_allocation_is_refused_without_a_read(
    memory: FakeMemory, offset: int, nbytes: int
) -> None:
    """The worker says where its bytes lie; the driver says how large the mapping is, and
    only the driver is believed (the fake asserts on any read past its allocation)."""
    memory.add(HANDLE, bytes(64))
    node = ipc_node(ipc_offset=offset, nbytes=nbytes, shape=[nbytes // 4])
    with pytest.raises(wire.WireError, match="reaches past"):
        wire.decode_value(node, [], Mappings(torch.device("cpu")).read)


def test_a_handle_that_does_not_open_is_a_wire_error(memory: FakeMemory) -> None:
    with pytest.raises(wire.WireError, match="cannot be read: cuIpcOpenMemHandle"):
        wire.decode_value(ipc_node(), [], Mappings(torch.device("cpu")).read)


def test_a_view_past_the_ipc_storage_is_refused(memory: FakeMemory) -> None:
    memory.add(HANDLE, bytes(32))
    with pytest.raises(wire.WireError, match="past the end"):
        wire.decode_value(ipc_node(shape=[4], offset=5), [], Mappings(torch.device("cpu")).read)


def test_the_judge_reads_a_copy_of_exactly_the_named_bytes(memory: FakeMemory) -> None:
    values = torch.arange(16, dtype=torch.float32)
    memory.add(HANDLE, values.view(torch.uint8).numpy().tobytes())
    node = ipc_node(ipc_offset=16, nbytes=32, shape=[2, 3], stride=[3, 1], offset=1)
    decoded = wire.decode_value(node, [], Mappings(torch.device("cpu")).read)
    assert isinstance(decoded, wire.WireTensor)
    assert decoded.nbytes == 32 and decoded.address == 4096
    assert torch.equal(decoded.storage, values[4:12])
    assert torch.equal(decoded.view(), values[5:11].reshape(2, 3))
    memory.allocations[HANDLE].fill_(0)  # the sender writes after the judge copied
    assert torch.equal(decoded.storage, values[4:12])


# -- the judge's mappings ------------------------------------------------------------------


def test_mappings_are_kept_per_handle_and_the_oldest_closed_beyond_the_bound(
    memory: FakeMemory,
) -> None:
    handles = [bytes([i]) * HANDLE_BYTES for i in range(4)]
    for handle in handles:
        memory.add(handle, bytes(8))
    reader = Mappings(torch.device("cpu"), keep=2)
    for handle in [handles[0], handles[0], handles[1], handles[0], handles[2]]:
        reader.read(IpcRef(handle, 0, 8))
    assert memory.opened == handles[:3]  # handle 0 opened once, reused twice
    assert len(reader) == 2 and len(memory.closed) == 1  # handle 1, the least recent, went
    reader.close()
    assert len(reader) == 0 and len(memory.closed) == 3


def test_the_worker_side_lets_each_mapping_go_after_its_copy(memory: FakeMemory) -> None:
    memory.add(HANDLE, bytes(8))
    reader = Mappings(torch.device("cpu"), keep=0)
    reader.read(IpcRef(HANDLE, 0, 8))
    reader.read(IpcRef(HANDLE, 0, 8))
    assert len(memory.opened) == 2 and len(memory.closed) == 2 and len(reader) == 0


def test_a_refused_range_still_closes_a_worker_side_mapping(memory: FakeMemory) -> None:
    memory.add(HANDLE, bytes(8))
    reader = Mappings(torch.device("cpu"), keep=0)
    with pytest.raises(ValueError, match="reaches past"):
        reader.read(IpcRef(HANDLE, 4, 8))
    assert len(memory.closed) == 1


# -- the sender's side of the protocol ---------------------------------------------------------


def test_a_carried_storage_needs_no_blob_and_a_declined_one_goes_as_bytes(
    memory: FakeMemory,
) -> None:
    a, b = torch.arange(6, dtype=torch.float32), torch.arange(4, dtype=torch.int16)
    carried: list[torch.UntypedStorage] = []

    def carry(storage: torch.UntypedStorage) -> dict[str, Any] | None:
        if storage.nbytes() != a.untyped_storage().nbytes():
            return None  # e.g. a storage that cannot be exported: bytes instead
        carried.append(storage)
        memory.add(HANDLE, wire.untyped_storage_bytes(storage, torch.device("cpu")).tobytes())
        return IpcRef(HANDLE, 0, storage.nbytes()).to_node()

    blobs: list[Any] = []
    node = wire.encode_value([a, b[1:]], blobs, carry=carry)
    assert len(carried) == 1 and len(blobs) == 1
    assert "blob" not in node["items"][0] and node["items"][1]["blob"] == 0
    decoded = wire.decode_value(node, blobs, Mappings(torch.device("cpu")).read)
    assert torch.equal(decoded[0].view(), a) and torch.equal(decoded[1].view(), b[1:])


def test_a_host_storage_is_never_exported() -> None:
    exports = cuda_ipc.Exports(torch.device("cpu"))
    assert exports.export(torch.ones(4).untyped_storage(), snapshot=True) is None
    assert list(exports) == []


# -- the fallback decision -------------------------------------------------------------------


def test_cpu_mode_uses_the_pipe_and_says_so() -> None:
    session = WorkerSession(Path("unused.py"), [], device="cpu")
    session._choose_data_path()
    assert session.data_path_report() == {
        "path": "pipe",
        "why": "CPU mode: storages cross as bytes",
    }


def test_the_environment_switch_forces_the_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cuda_ipc.ENV_SWITCH, "pipe")
    session = WorkerSession(Path("unused.py"), [], device="cuda")
    session._choose_data_path()  # decided before any worker is asked
    assert session.data_path == "pipe" and "KERNELGATE_WIRE=pipe" in session.data_path_note


def test_ipc_that_fails_in_the_judge_falls_back_once_for_the_session(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(cuda_ipc.ENV_SWITCH, raising=False)
    attempts: list[int] = []

    def no_ipc(self: Any, storage: Any) -> None:
        attempts.append(1)
        raise IpcError("libcuda.so.1 cannot be loaded: not here")

    monkeypatch.setattr(cuda_ipc.Exports, "stage", no_ipc)
    monkeypatch.setattr(torch, "full", lambda *a, **k: torch.zeros(4096, dtype=torch.uint8))
    session = WorkerSession(Path("unused.py"), [], device="cuda")
    session._choose_data_path()
    session._choose_data_path()  # a restarted worker: not probed again
    assert attempts == [1]
    assert session.data_path == "pipe"
    assert session.data_path_note.startswith("IPC unavailable in the judge: libcuda")


def test_a_worker_that_refuses_the_probe_sets_the_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe's answer comes from a worker no candidate has touched yet; still, its
    refusal only ever makes the judge take the slower, byte path."""
    monkeypatch.delenv(cuda_ipc.ENV_SWITCH, raising=False)
    monkeypatch.setattr(cuda_ipc.Exports, "stage", lambda self, s: IpcRef(HANDLE, 0, 4096))
    monkeypatch.setattr(cuda_ipc.Exports, "release", lambda self: None)
    monkeypatch.setattr(torch, "full", lambda *a, **k: torch.zeros(4096, dtype=torch.uint8))
    asked: list[dict[str, Any]] = []

    def exchange(header: dict[str, Any], blobs: list[Any], timeout: float) -> Any:
        asked.append(header)
        return {"ok": False, "error": "IpcError: cuIpcOpenMemHandle failed"}, []

    session = WorkerSession(Path("unused.py"), [], device="cuda")
    monkeypatch.setattr(session, "_exchange", exchange)
    session._choose_data_path()
    assert asked[0]["op"] == "ipc" and asked[0]["ipc"] == HANDLE.hex()
    assert session.data_path_report() == {
        "path": "pipe",
        "why": "IPC failed in the worker: IpcError: cuIpcOpenMemHandle failed",
    }
