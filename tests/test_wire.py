"""The judge parses nothing from the worker but JSON and raw bytes, and checks both."""

from __future__ import annotations

import os

import pytest
import torch

from kernelgate.sandbox import wire


def roundtrip(value):
    blobs: list[bytes] = []
    node = wire.encode_value(value, blobs)
    return wire.decode_value(node, blobs)


def test_tensor_roundtrip_keeps_storage_view_and_bytes() -> None:
    base = torch.arange(20, dtype=torch.float32)
    view = base[3:15].view(3, 4)[:, 1:3]
    got = roundtrip([view, 2.5, None, (float("nan"), torch.float16)])
    tensor = got[0]
    assert tensor.storage.numel() == 20 and tensor.offset == view.storage_offset()
    assert torch.equal(tensor.view(), view)
    assert got[1] == 2.5 and got[2] is None and got[3][1] is torch.float16
    assert got[3][0] != got[3][0]


def test_bfloat16_crosses_bit_exactly() -> None:
    value = torch.randn(7, dtype=torch.bfloat16)
    assert torch.equal(roundtrip(value).view().view(torch.int16), value.view(torch.int16))


@pytest.mark.parametrize(
    "mutate",
    [
        lambda n: n.update(offset=10_000),  # view reaches past the storage
        lambda n: n.update(dtype="object"),
        lambda n: n.update(shape=[2, 2], stride=[1]),
        lambda n: n.update(blob=5),
        lambda n: n.update(stride=[-1]),
        lambda n: n.update(shape=["2"]),
    ],
    ids=["past-end", "dtype", "rank", "blob", "negative-stride", "not-int"],
)
def test_malformed_tensor_headers_are_rejected(mutate) -> None:
    blobs: list[bytes] = []
    node = wire.encode_value(torch.zeros(4), blobs)
    mutate(node)
    with pytest.raises(wire.WireError):
        wire.decode_value(node, blobs)


def test_frames_over_a_pipe_and_limits() -> None:
    read_fd, write_fd = os.pipe()
    try:
        wire.send_frame(write_fd, {"op": "x"}, [b"abc", b""])
        header, blobs = wire.recv_frame(read_fd, deadline=None)
        assert header["op"] == "x" and blobs == [b"abc", b""]
        os.write(write_fd, (wire.MAX_HEADER_BYTES + 1).to_bytes(8, "big"))
        with pytest.raises(wire.WireError):
            wire.recv_frame(read_fd)
    finally:
        os.close(read_fd)
        os.close(write_fd)


def test_peer_gone_and_timeout() -> None:
    import time

    read_fd, write_fd = os.pipe()
    with pytest.raises(wire.PeerTimeout):
        wire.recv_frame(read_fd, deadline=time.monotonic() + 0.05)
    os.close(write_fd)
    with pytest.raises(wire.PeerGone):
        wire.recv_frame(read_fd, deadline=time.monotonic() + 1)
    os.close(read_fd)


def test_side_effects_cross_the_wire_only_when_asked(tmp_path) -> None:
    """Input storages after the call and the call's allocations are MEM-01's evidence; every
    other call brings back its outputs alone (at KernelBench sizes the rest was most of the
    bytes)."""
    from kernelgate.inputs.placement import GUARD_BYTES, POISONS, PlacedTensor
    from kernelgate.sandbox.session import WorkerSession

    candidate = tmp_path / "candidate.py"
    candidate.write_text(
        "import torch\n\nclass ModelNew(torch.nn.Module):\n"
        "    def forward(self, x):\n        return (x * 2).relu() + 1\n"
    )
    placed = PlacedTensor.place(torch.randn(4, 8))
    with WorkerSession(candidate, [], timeout=60) as session:
        results = {
            asked: session.call(
                [placed.as_wire()], poison=POISONS[0], guard_bytes=GUARD_BYTES, side_effects=asked
            )
            for asked in (False, True)
        }
    assert results[False].inputs_after == [] and results[False].allocations == []
    assert len(results[True].inputs_after) == 1  # (CPU allocations are not guarded: none)
    for result in results.values():
        assert torch.equal(result.outputs.view(), (placed.view() * 2).relu() + 1)
