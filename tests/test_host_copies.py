"""Device results brought to the host pinned (inputs/host.py): the same bits as
``Tensor.cpu``, pinned only where asked and small enough."""

from __future__ import annotations

import pytest
import torch

from kernelgate.inputs import host


def test_a_host_tensor_is_returned_as_it_is() -> None:
    x = torch.arange(6.0)
    assert host.to_host(x) is x


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("make", ["contiguous", "transposed", "sliced", "bf16", "empty"])
def test_the_same_bits_as_cpu_and_pinned(make: str) -> None:
    base = torch.randn(64, 48, device="cuda")
    value = {
        "contiguous": base,
        "transposed": base.t(),
        "sliced": base[:, ::2],
        "bf16": base.to(torch.bfloat16),
        "empty": base[:0],
    }[make]
    got, want = host.to_host(value), value.cpu()
    assert got.device.type == "cpu" and got.dtype == want.dtype and got.shape == want.shape
    assert torch.equal(got, want)  # randn: no NaN to tell apart
    assert got.stride() == want.stride()
    if make != "empty":
        assert got.is_pinned()


@pytest.mark.gpu
@needs_cuda
def test_large_tensors_and_the_switch_fall_back_to_a_plain_copy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    value = torch.randn(1024, device="cuda")
    monkeypatch.setattr(host, "PINNED_MAX_BYTES", 1024)
    assert not host.to_host(value).is_pinned()
    monkeypatch.setattr(host, "PINNED_MAX_BYTES", 1 << 30)
    assert host.to_host(value).is_pinned()
    monkeypatch.setenv(host.ENV, "0")
    copied = host.to_host(value)
    assert not copied.is_pinned() and torch.equal(copied, value.cpu())
