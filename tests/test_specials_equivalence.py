"""``inject`` (vectorised) writes the same specials at the same positions as the old loop."""

from __future__ import annotations

import pytest
import torch

from kernelgate.inputs.specials import SPECIALS, inject

from .equivalence import same_bits


def _old_inject(
    values: torch.Tensor, kind: str, seed: int, *, whole_row: bool = False
) -> torch.Tensor:
    """Frozen copy of ``inject`` before vectorisation (one Python write per position)."""
    out = values.clone()
    if out.numel() == 0 or not out.is_floating_point():
        return out
    g = torch.Generator().manual_seed(seed)
    flat = out.view(-1)
    count = max(1, flat.numel() // 100)
    positions = torch.randperm(flat.numel(), generator=g)[:count]
    kinds = list(SPECIALS) if kind == "mixed" else [kind]
    for i, position in enumerate(positions.tolist()):
        flat[position] = SPECIALS[kinds[i % len(kinds)]]
    if whole_row and out.dim() >= 1:
        rows = out.reshape(-1, out.shape[-1])
        row = int(torch.randint(rows.shape[0], (1,), generator=g))
        rows[row] = SPECIALS[kinds[0]]
    return out


SHAPES = [(), (1,), (7,), (99,), (100,), (301,), (3, 5), (64, 33), (2, 3, 4, 5), (0,), (4, 0)]
DTYPES = [
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.float64,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
]
KINDS = [*SPECIALS, "mixed"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_inject_equals_old(dtype: torch.dtype, shape: tuple[int, ...]) -> None:
    values = torch.randn(shape, generator=torch.Generator().manual_seed(len(shape))).to(dtype)
    for kind in KINDS:
        for whole_row in (False, True):
            for seed in (0, 1, 7919, 123456789):
                old = _old_inject(values, kind, seed, whole_row=whole_row)
                new = inject(values, kind, seed, whole_row=whole_row)
                assert same_bits(old, new), (kind, whole_row, seed)
    assert same_bits(values, values.clone())  # the input is left alone


def test_inject_equals_old_on_large_and_odd_inputs() -> None:
    big = torch.randn(1000, 1003, generator=torch.Generator().manual_seed(0))
    for kind in KINDS:
        assert same_bits(
            _old_inject(big, kind, 5, whole_row=True), inject(big, kind, 5, whole_row=True)
        )
    ints = torch.arange(500)
    assert same_bits(_old_inject(ints, "nan", 1), inject(ints, "nan", 1))
    strided = big[:, ::2]  # clone keeps it dense and contiguous
    assert same_bits(_old_inject(strided, "mixed", 2), inject(strided, "mixed", 2))
    permuted = big.t()  # clone keeps the permuted strides: both refuse the flat view
    with pytest.raises(RuntimeError):
        _old_inject(permuted, "nan", 3)
    with pytest.raises(RuntimeError):
        inject(permuted, "nan", 3)
