"""ORD-01's cancellation rows and PRC-02's long one-signed rows drawn on the oracle's
device (inputs/adversarial.py): values come back to the host, reproducible, and keep the
properties the gates rely on."""

from __future__ import annotations

import pytest
import torch

from kernelgate.inputs.adversarial import PATTERNS, cancellation, long_positive, significand_bits

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


def _skip_without(device: str) -> None:
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs CUDA")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("pattern", PATTERNS)
def test_cancelling_rows_cancel_exactly_wherever_drawn(device: str, pattern: str) -> None:
    _skip_without(device)
    shape, dtype = (6, 257), torch.float32
    rows = cancellation(pattern, 11, shape, dtype, device=device)
    assert rows.device.type == "cpu" and rows.dtype == dtype and tuple(rows.shape) == shape
    assert torch.equal(rows, cancellation(pattern, 11, shape, dtype, device=device))
    big = 2.0 ** significand_bits(dtype)
    wide = rows.double()
    large = wide.abs() >= big
    # the large terms cancel exactly: the exact row sum is the sum of the small residues
    assert torch.equal((wide * large).sum(dim=1), torch.zeros(shape[0], dtype=torch.float64))
    residues = wide * ~large
    assert bool((residues >= 0.25).logical_or(large).all()) and bool((residues <= 1.0).all())


def test_on_the_cpu_an_explicit_device_changes_nothing() -> None:
    for pattern in PATTERNS:
        assert torch.equal(
            cancellation(pattern, 3, (4, 130), torch.float16),
            cancellation(pattern, 3, (4, 130), torch.float16, device="cpu"),
        )
    assert torch.equal(
        long_positive(5, (3, 99), torch.bfloat16, 0.5),
        long_positive(5, (3, 99), torch.bfloat16, 0.5, device="cpu"),
    )


@pytest.mark.parametrize("device", DEVICES)
def test_long_positive_rows_stay_in_their_range(device: str) -> None:
    _skip_without(device)
    values = long_positive(9, (5, 1000), torch.bfloat16, spread=1.0, device=device)
    assert values.device.type == "cpu" and values.dtype == torch.bfloat16
    wide = values.double()
    assert bool((wide >= 0.5).all()) and bool((wide <= 1.5).all())
    assert torch.equal(values, long_positive(9, (5, 1000), torch.bfloat16, 1.0, device=device))
