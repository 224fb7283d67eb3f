"""Adversarial inputs for reductions: cancellation (ORD-01) and long accumulations (PRC-02).

ORD-01 builds rows where large terms cancel exactly and small positive residues carry the
answer. The magnitude of the computation (sum of |terms|) is dominated by the large terms,
so the order bound is generous, yet:
- a kernel that drops the last partial block loses a large term: error ~ B, far past it;
- a long sequential running sum holds ~B while the residues arrive, and each residue is
  below half an ulp of B, so all of them are lost: error ~ sum of residues, past the
  probabilistic bound once the row is long;
- a reduction whose grouping depends on a race sees the same effect in some schedules.
``B = 2**p`` for a p-bit significand: the smallest power of two whose half-ulp exceeds
every residue, which makes the loss maximal relative to the bound.

PRC-02 builds long one-signed rows of values in [0.5, 1.5) with full fraction bits: a
running sum in fp16 or bf16 rounds at every step at the partial sum's ulp, so its error is
thousands of times the fp32 order bound at any length.
"""

from __future__ import annotations

import torch

from kernelgate.inputs import cpu_stream
from kernelgate.inputs.distributions import round_to
from kernelgate.inputs.host import to_host

PATTERNS = ("cancel-ends", "cancel-pairs", "sorted-descending", "sorted-ascending")
# Generator words drawn per block of rows by ``_place_pairs`` (about 128 MiB of int64 words
# and their remainders at a time).
ROW_BLOCK_WORDS = 1 << 23


def significand_bits(dtype: torch.dtype) -> int:
    """p for a dtype whose unit roundoff is 2**-p (24 for fp32, 11 fp16, 8 bf16)."""
    return round(-torch.log2(torch.tensor(torch.finfo(dtype).eps)).item()) + 1


def _rows(shape: tuple[int, ...], axis: int) -> tuple[int, int]:
    n = shape[axis] if shape else 1
    return (max(1, (torch.Size(shape).numel() // max(n, 1))) if shape else 1), n


def _to_axis(rows: torch.Tensor, shape: tuple[int, ...], axis: int) -> torch.Tensor:
    """(rows, N) laid along ``axis`` of ``shape``."""
    if not shape:
        return rows.reshape(())
    moved = list(shape)
    n = moved.pop(axis)
    return rows.reshape(*moved, n).movedim(-1, axis).contiguous()


def cancellation(
    pattern: str,
    seed: int,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    axis: int = -1,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Values of ``dtype`` whose reduction along ``axis`` cancels large terms exactly, on
    the CPU.

    ``device`` is where the rows are drawn, sorted and rounded (as ``distributions.draw``'s
    are): on the host a KernelBench-sized case took a judge given one core several seconds
    of float64 passes (random draw, rounding twice, a sort, a transpose). The same seed
    gives other values on another device type, so a replay names its device. There
    "cancel-pairs" places its pairs from a CPU generator of the same seed (``cpu_stream``
    emulates the CPU generator's permutations only).
    """
    device = torch.device(device)
    g = torch.Generator(device).manual_seed(seed)
    axis = axis % len(shape) if shape else 0
    n_rows, n = _rows(tuple(shape), axis)
    big = 2.0 ** significand_bits(dtype)
    rows = torch.rand((n_rows, n), generator=g, dtype=torch.float64, device=device) * 0.75 + 0.25
    rows = round_to(rows, dtype).to(torch.float64)
    if n >= 2:
        if pattern == "cancel-ends":
            rows[:, 0], rows[:, -1] = big, -big
        elif pattern == "cancel-pairs":
            pairs_from = g if device.type == "cpu" else torch.Generator().manual_seed(seed)
            if n < cpu_stream.RANDPERM_SWAP_LIMIT and cpu_stream.agrees_with_torch():
                _place_pairs(rows, pairs_from, big)
            else:
                _place_pairs_row_by_row(rows, pairs_from, big)
        elif pattern == "sorted-descending":
            rows = rows.sort(dim=1, descending=True).values
            rows[:, 0], rows[:, -1] = big, -big
        elif pattern == "sorted-ascending":
            rows = rows.sort(dim=1).values
            rows[:, -2], rows[:, -1] = big, -big
        else:
            raise ValueError(f"unknown cancellation pattern {pattern!r}; known: {PATTERNS}")
    return to_host(round_to(_to_axis(rows, tuple(shape), axis), dtype))


def _place_pairs_row_by_row(rows: torch.Tensor, g: torch.Generator, big: float) -> None:
    """Write the cancelling pairs of the "cancel-pairs" pattern into ``rows``, in place.

    This loop defines the pattern's values: for each row in turn, ``pairs`` positions get
    ``+scale`` and ``pairs`` others ``-scale`` (distinct positions, the head of a seeded
    permutation), with one seeded scale ``big * 2**e``, ``e`` in {0, 1, 2}, per pair.
    ``_place_pairs`` makes the same values from the same stream at once.
    """
    n_rows, n = rows.shape
    pairs = max(1, n // 64)
    for r in range(n_rows):
        where = torch.randperm(n, generator=g)[: 2 * pairs].to(rows.device)
        scale = big * 2.0 ** torch.randint(0, 3, (pairs,), generator=g).to(rows)
        rows[r, where[:pairs]] = scale
        rows[r, where[pairs:]] = -scale


def _place_pairs(rows: torch.Tensor, g: torch.Generator, big: float) -> None:
    """``_place_pairs_row_by_row``, bit for bit, for many rows at once (see ``cpu_stream``).

    Each row's loop iteration reads ``n - 1`` words for its ``randperm(n)`` and then
    ``pairs`` words for its ``randint(0, 3)``; the words of a block of rows are drawn at
    once and split the same way. The one-per-row Python loop (262,144 ``randperm`` calls,
    21 s, at KernelBench's 67M-element RMSNorm) becomes a few array operations per block.
    """
    n_rows, n = rows.shape
    pairs = max(1, n // 64)
    per_row = n - 1 + pairs
    block = max(1, ROW_BLOCK_WORDS // per_row)
    for start in range(0, n_rows, block):
        count = min(block, n_rows - start)
        drawn = cpu_stream.words(g, count * per_row).reshape(count, per_row)
        # Steps past n - 2 (only when 2 * pairs == n) have one choice and take no word.
        where = torch.from_numpy(cpu_stream.fisher_yates_prefix(drawn[:, : 2 * pairs], n))
        exponent = torch.from_numpy(drawn[:, n - 1 :] % 3)
        where, exponent = where.to(rows.device), exponent.to(rows.device)
        scale = big * 2.0 ** exponent.to(torch.float64)
        row = torch.arange(start, start + count, device=rows.device).unsqueeze(1)
        rows[row, where[:, :pairs]] = scale
        rows[row, where[:, pairs:]] = -scale


def long_positive(
    seed: int,
    shape: tuple[int, ...],
    dtype: torch.dtype,
    spread: float = 1.0,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """One-signed values in [1 - spread/2, 1 + spread/2) with full fraction bits (PRC-02),
    on the CPU; drawn and rounded on ``device`` (see ``cancellation``)."""
    g = torch.Generator(device).manual_seed(seed)
    drawn = torch.rand(tuple(shape), generator=g, dtype=torch.float64, device=device)
    return to_host(round_to(1.0 + (drawn - 0.5) * spread, dtype))


def ones_like_template(template: torch.Tensor) -> torch.Tensor:
    """Exact ones: the partner operand of a contraction keeps the cancellation exact."""
    return torch.ones(template.shape, dtype=template.dtype)
