"""Every dtype torch has, through the judge: the wire, the poison, the draws and the oracle.

Issue 20: kernelgate crashed on every fp8 record (``dtype torch.float8_e4m3fn cannot cross
the wire``). A dtype the judge can judge must cross bit for bit; one it cannot (complex32,
quantized, bits, sub-byte) must be a clear ``unsupported dtype`` error, never a crash.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch

import kernelgate
from kernelgate.errors import UnsupportedDtypeError
from kernelgate.formats.kernelbench import load_reference
from kernelgate.inputs.distributions import DISTRIBUTIONS, draw
from kernelgate.inputs.placement import POISONS, PlacedTensor
from kernelgate.inputs.specials import SPECIALS, Density, inject, special_kinds
from kernelgate.oracle.fp64 import Oracle, cast_values
from kernelgate.sandbox import wire
from kernelgate.sandbox.poison import PoisonAllocator

ALL_DTYPES = sorted(
    {getattr(torch, n) for n in dir(torch) if isinstance(getattr(torch, n), torch.dtype)}, key=str
)
REQUIRED = ["float8_e4m3fn", "float8_e5m2", "int8", "uint8", "int16", "int32", "int64", "bool"]
FLOAT8 = [
    getattr(torch, n)
    for n in (
        "float8_e4m3fn",
        "float8_e5m2",
        "float8_e4m3fnuz",
        "float8_e5m2fnuz",
        "float8_e8m0fnu",
    )
    if hasattr(torch, n)
]


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _unsupported_family(name: str) -> bool:
    """The dtypes kernelgate knowingly refuses: experimental, quantized, untyped, packed."""
    return (
        name == "complex32"
        or name.startswith(("qint", "quint", "bits", "float4"))
        or (name.startswith(("int", "uint")) and int(name.removeprefix("u")[3:] or 0) < 8)
    )


def test_the_required_dtypes_are_supported_and_every_other_is_refused_for_a_reason() -> None:
    for name in REQUIRED:
        assert name in wire.DTYPES
    for dtype in ALL_DTYPES:
        name = _name(dtype)
        assert (name in wire.DTYPES) != _unsupported_family(name), name


def _random_storage(dtype: torch.dtype, numel: int, seed: int) -> torch.Tensor:
    """Arbitrary bytes (NaN payloads, non-0/1 bools included): what a hostile worker sends."""
    g = torch.Generator().manual_seed(seed)
    itemsize = torch.empty(0, dtype=dtype).element_size()
    raw = torch.randint(0, 256, (numel * itemsize,), dtype=torch.uint8, generator=g)
    return raw.view(dtype)


@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_name)
def test_every_torch_dtype_crosses_the_wire_bit_exactly_or_is_refused(dtype: torch.dtype) -> None:
    name = _name(dtype)
    if name not in wire.DTYPES:
        tensor = torch.empty(4, dtype=dtype)
        for value in (tensor, [1, (tensor,)], dtype):
            with pytest.raises(wire.UnsupportedDtype, match=f"unsupported dtype torch.{name}: "):
                wire.encode_value(value, [])
        assert [path for path, _ in wire.unsupported_dtypes([1, (tensor,)])] == ["[1][0]"]
        return
    storage = _random_storage(dtype, 40, seed=len(name))
    view = storage.as_strided((3, 4), (8, 2), 5)  # strided, offset: the storage travels whole
    read_fd, write_fd = wire.pipe()
    try:
        blobs: list[object] = []
        header = {"values": wire.encode_value([view, dtype], blobs)}
        wire.send_frame(write_fd, header, blobs)
        got_header, got_blobs = wire.recv_frame(read_fd, deadline=None)
    finally:
        os.close(read_fd)
        os.close(write_fd)
    tensor, got_dtype = wire.decode_value(got_header["values"], got_blobs)
    assert got_dtype == dtype and tensor.storage.dtype == dtype
    assert (tensor.shape, tensor.stride, tensor.offset) == ((3, 4), (8, 2), 5)
    assert torch.equal(tensor.storage.view(torch.uint8), storage.view(torch.uint8))
    assert torch.equal(
        tensor.view().contiguous().view(torch.uint8), view.contiguous().view(torch.uint8)
    )
    assert wire.unsupported_dtypes([view, {"k": (view,)}]) == []


def test_an_unknown_dtype_name_from_the_worker_is_a_wire_error() -> None:
    with pytest.raises(wire.WireError, match="unknown dtype 'qint8'"):
        wire.decode_value({"t": "dtype", "v": "qint8"}, [])


@pytest.mark.parametrize("dtype", FLOAT8, ids=_name)
def test_the_poisons_mean_nan_and_finite_in_every_float8_dtype(dtype: torch.dtype) -> None:
    """The first poison reads as NaN in every floating dtype (0x80 in the fnuz ones, where
    0xFF is the finite -max), the second as a finite value; both in the judge's guard bands
    and in the worker's poisoned allocations."""
    values = torch.ones(3, 5, dtype=torch.float32).to(dtype)
    nan_band, finite_band = (
        PlacedTensor.place(values, poison=p, guard_bytes=32).storage[:32].to(torch.float64)
        for p in POISONS
    )
    assert nan_band.isnan().all()
    assert torch.isfinite(finite_band).all()
    allocator = PoisonAllocator()
    with allocator.active(POISONS[0], 16):
        fresh = torch.empty(7, dtype=dtype)
    assert fresh.to(torch.float64).isnan().all()
    assert allocator.allocations[0].base.to(torch.float64).isnan().all()


def _decode_float8(byte: int, dtype: torch.dtype) -> float:
    """The value of a float8 byte from its format's definition (OCP and AMD fnuz), written
    independently of torch's conversions."""
    name = _name(dtype)
    if name == "float8_e8m0fnu":
        return float("nan") if byte == 0xFF else 2.0 ** (byte - 127)
    exponent_bits, bias = {
        "float8_e4m3fn": (4, 7),
        "float8_e5m2": (5, 15),
        "float8_e4m3fnuz": (4, 8),
        "float8_e5m2fnuz": (5, 16),
    }[name]
    mantissa_bits = 7 - exponent_bits
    sign = -1.0 if byte & 0x80 else 1.0
    exponent = (byte >> mantissa_bits) & ((1 << exponent_bits) - 1)
    mantissa = byte & ((1 << mantissa_bits) - 1)
    if name.endswith("fnuz") and byte == 0x80:
        return float("nan")
    if name == "float8_e4m3fn" and byte & 0x7F == 0x7F:
        return float("nan")
    if name == "float8_e5m2" and exponent == 31:
        return sign * float("inf") if mantissa == 0 else float("nan")
    if exponent == 0:
        return sign * mantissa * 2.0 ** (1 - bias - mantissa_bits)
    return sign * (1 + mantissa / 2**mantissa_bits) * 2.0 ** (exponent - bias)


def _assert_same_float64(got: torch.Tensor, want: torch.Tensor) -> None:
    assert got.dtype == torch.float64
    assert torch.equal(got.isnan(), want.isnan())
    finite = ~want.isnan()
    assert torch.equal(got[finite], want[finite])
    assert torch.equal(got[finite].signbit(), want[finite].signbit())  # -0.0 stays -0.0


IDENTITY = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.clone()


def get_inputs():
    return [torch.zeros(4)]


def get_init_inputs():
    return []
"""


def test_low_precision_inputs_reach_the_float64_oracle_exactly(tmp_path: Path) -> None:
    """Every bit pattern of every float8 dtype, float16 and bfloat16, through the oracle."""
    reference = tmp_path / "identity.py"
    reference.write_text(IDENTITY)
    oracle = Oracle(load_reference(reference))
    every_byte = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    every_half = torch.arange(1 << 16, dtype=torch.int32).to(torch.int16)
    cases = [
        (
            every_byte.view(dtype),
            torch.tensor([_decode_float8(b, dtype) for b in range(256)], dtype=torch.float64),
        )
        for dtype in FLOAT8
    ]
    cases.append(  # numpy's float16, an implementation of its own
        (every_half.view(torch.float16), torch.from_numpy(every_half.numpy().view(np.float16)))
    )
    cases.append(  # bfloat16 is the top half of a float32: exact by construction
        (
            every_half.view(torch.bfloat16),
            (every_half.to(torch.int32) << 16).view(torch.float32).to(torch.float64),
        )
    )
    for values, want in cases:
        want = want.to(torch.float64)
        _assert_same_float64(cast_values(values, torch.float64, torch.device("cpu")), want)
        (expected,) = oracle.expected([values])
        _assert_same_float64(expected, want)


@pytest.mark.parametrize("dtype", FLOAT8, ids=_name)
def test_drawn_float8_values_are_finite_and_specials_only_of_kinds_the_dtype_has(
    dtype: torch.dtype,
) -> None:
    for name in DISTRIBUTIONS:
        values = draw(name, 3, (64, 65), dtype)
        assert values.dtype == dtype
        assert torch.isfinite(values.to(torch.float64)).all(), name
    values = draw("normal", 0, (8, 9), dtype)
    for kind in SPECIALS:
        injected = inject(values, kind, seed=1, density=Density.WHOLE_ROW).to(torch.float64)
        if kind in special_kinds(dtype):
            assert (injected.isnan() if kind == "nan" else injected == float(kind)).any()
        else:  # float8_e4m3fn has no Inf: nothing else is written under its name
            assert torch.equal(injected, values.to(torch.float64))
    assert special_kinds(torch.float8_e4m3fn) == ("nan",)
    assert special_kinds(torch.float8_e5m2) == ("nan", "+inf", "-inf")
    assert special_kinds(torch.int8) == special_kinds(torch.bool) == ()


QUANTIZED_REFERENCE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return x.dequantize()


def get_inputs():
    return [torch.quantize_per_tensor(torch.randn(8, 8), 0.1, 0, torch.qint8)]


def get_init_inputs():
    return []
"""

FP8_REFERENCE = """
import torch
import torch.nn as nn

M = 32
N = 48


class Model(nn.Module):
    def forward(self, x, scale):
        return x.to(torch.float32) * scale


def get_inputs():
    return [torch.randn(M, N).to(torch.float8_e4m3fn), torch.rand(M, 1) + 0.5]


def get_init_inputs():
    return []
"""

FP8_CANDIDATE = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, scale):
        return {body}
"""


@pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor")
def test_an_unsupported_dtype_is_a_clear_error_before_any_gate(tmp_path: Path) -> None:
    reference = tmp_path / "quantized.py"
    reference.write_text(QUANTIZED_REFERENCE)
    candidate = tmp_path / "candidate.py"
    candidate.write_text(FP8_CANDIDATE.format(body="x.dequantize()").replace("x, scale", "x"))
    with pytest.raises(UnsupportedDtypeError) as caught:
        kernelgate.verify(reference, candidate, only=["CMP-01"])
    message = str(caught.value)
    assert message.startswith("the reference's get_inputs()[0]: unsupported dtype torch.qint8")
    assert "float8_e4m3fn" in message  # what is supported, i.e. what to do instead


def test_fp8_reference_honest_candidate_verified_one_that_drops_the_scale_rejected(
    tmp_path: Path,
) -> None:
    """End to end on the CPU: every gate runs on an fp8 input beside its float32 scale."""
    reference = tmp_path / "fp8_scale.py"
    reference.write_text(FP8_REFERENCE)
    honest, dropped = tmp_path / "honest.py", tmp_path / "dropped.py"
    honest.write_text(FP8_CANDIDATE.format(body="x.float() * scale"))
    dropped.write_text(FP8_CANDIDATE.format(body="x.float()"))
    verdict = kernelgate.verify(reference, honest)
    assert verdict.verdict.value == "verified", [(g.id, g.status, g.reason) for g in verdict.gates]
    gates = {g.id: g for g in verdict.gates}
    assert gates["CMP-01"].status.value == "pass" and gates["EXC-01"].status.value == "pass"
    rejected = kernelgate.verify(reference, dropped, only=["CMP-01"])
    assert rejected.verdict.value == "rejected"
    assert rejected.failed_gates == ["CMP-01"]


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_the_dependence_probes_judge_float8_inputs_the_oracle_sees_in_their_dtype(
    dtype: torch.dtype,
) -> None:
    """EXC-01's probes edit the inputs (masked_fill, where, |x| + 1), which torch lacks for
    float8; on an fp8 GEMM they crashed the judge. A causal running sum: a NaN at column 3
    of row 0 reaches out[0, 3:] only, and the oracle is always handed the case's dtype."""
    from kernelgate.oracle import dependence

    seen: list[torch.dtype] = []

    def expected(values: list[torch.Tensor]) -> list[torch.Tensor]:
        seen.append(values[0].dtype)
        return [values[0].double().cumsum(-1)]

    x = torch.tensor([[1.0, -2.0, 0.5, 0.0, 448.0, 3.0], [4.0, 1.0, -1.0, 2.0, 0.25, 8.0]])
    x = x.to(dtype)
    x[0, 3] = float("nan")
    assert dependence.has_specials(dependence.special_masks([x]))
    oracle = expected([x])
    probe = dependence.coarse_probe([x], expected, oracle)[0]
    assert probe[0, :3].isfinite().all() and probe[0, 3:].isnan().all()
    torch.testing.assert_close(probe[1], oracle[0][1], rtol=0, atol=0)
    disputed = torch.zeros(2, 6, dtype=torch.bool)
    disputed[0, :] = True
    refined = dependence.refined_probe([x], expected, 0, disputed, probe)
    assert refined is not None and refined[0, :3].isfinite().all() and refined[0, 3:].isnan().all()
    completed = dependence.completion_probe([x], expected, 0, disputed, probe)
    assert completed is not None and len(completed) == 2
    assert set(seen) == {dtype}


def test_a_dependence_probe_past_its_time_budget_excuses_nothing(monkeypatch) -> None:
    """The refined probe and the completion run the oracle once or twice a unit; past
    MAX_PROBE_SECONDS they give up (None: no position excused), as over the unit budget."""
    from kernelgate.oracle import dependence

    x = torch.randn(2, 6)
    x[0, 3] = float("nan")
    disputed = torch.zeros(2, 6, dtype=torch.bool)
    disputed[0] = True

    def expected(values: list[torch.Tensor]) -> list[torch.Tensor]:
        return [values[0].double().cumsum(-1)]

    fallback = dependence.coarse_probe([x], expected, expected([x]))[0]
    assert dependence.refined_probe([x], expected, 0, disputed, fallback) is not None
    assert dependence.completion_probe([x], expected, 0, disputed, fallback) is not None
    monkeypatch.setattr(dependence, "MAX_PROBE_SECONDS", -1.0)
    assert dependence.refined_probe([x], expected, 0, disputed, fallback) is None
    assert dependence.completion_probe([x], expected, 0, disputed, fallback) is None
