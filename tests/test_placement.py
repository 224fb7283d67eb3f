"""Where the judge places its inputs (inputs/placement.py, GateContext.placement_device)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from kernelgate.gates.base import GateContext
from kernelgate.inputs.layouts import Layout, place_layout
from kernelgate.inputs.placement import GUARD_BYTES, PlacedTensor, contiguous_strides
from kernelgate.sandbox import cuda_ipc


@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 0, 3), (1, 5, 1), (4, 1, 2, 3)])
def test_contiguous_strides_are_torchs_without_allocating(shape: tuple[int, ...]) -> None:
    assert contiguous_strides(shape) == torch.empty(shape).stride()


def test_a_placed_tensor_holds_the_values_between_poisoned_guard_bands() -> None:
    values = torch.arange(10, dtype=torch.float32).reshape(2, 5)
    placed = PlacedTensor.place(values, poison=0x5A, shift_elements=1)
    assert placed.storage.device.type == "cpu"
    assert torch.equal(placed.view(), values) and placed.stride == (5, 1)
    guard = GUARD_BYTES // 4
    raw = placed.storage.view(torch.uint8)
    assert bool((raw[: (guard + 1) * 4] == 0x5A).all())
    assert bool((raw[(guard + 1 + 10) * 4 :] == 0x5A).all())


@pytest.mark.parametrize("layout", list(Layout))
def test_every_layout_places_where_it_is_told(layout: Layout) -> None:
    values = torch.ones(3, 4)
    placed = place_layout(values, layout, device="cpu")
    assert placed.storage.device.type == "cpu"
    assert torch.equal(placed.view(), values)


@pytest.mark.parametrize(
    "data_path, device, expected",
    [(cuda_ipc.IPC, "cuda", "cuda"), (cuda_ipc.PIPE, "cuda", None), (cuda_ipc.PIPE, "cpu", None)],
)
def test_inputs_go_on_the_device_only_on_the_ipc_path(
    data_path: str, device: str, expected: str | None
) -> None:
    session = SimpleNamespace(data_path=data_path, device=device)
    assert GateContext.placement_device(session) == expected  # type: ignore[arg-type]
