"""The bulk draws that replaced per-row loops give today's values, bit for bit (issue 19).

Seeded inputs are evidence: a changed value is a changed verdict and a replay that no
longer reproduces. Each fast path is compared with the straightforward loop it replaced,
and the values are pinned by digests taken from the code before the change.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from kernelgate.inputs import adversarial, cpu_stream
from kernelgate.inputs.adversarial import cancellation
from kernelgate.inputs.specials import Density, inject


def _digest(t: torch.Tensor) -> str:
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def _shuffle_head(words: list[int], n: int, k: int) -> list[int]:
    """The first ``k`` values of a forward Fisher-Yates shuffle of ``0..n-1``, step by step."""
    perm = list(range(n))
    for i in range(min(k, n - 1)):
        j = i + words[i] % (n - i)
        perm[i], perm[j] = perm[j], perm[i]
    return perm[:k]


def test_the_model_of_torchs_generator_holds_here() -> None:
    # Without it every fast path falls back to torch's own loops and is not tested here.
    assert cpu_stream.agrees_with_torch()


@pytest.mark.parametrize(
    ("n", "k"), [(2, 1), (2, 2), (3, 3), (17, 5), (64, 2), (1000, 10), (1000, 1000), (70001, 700)]
)
@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_randperm_prefix_is_torchs_randperm_head_and_leaves_the_generator_alike(
    n: int, k: int, seed: int
) -> None:
    ours, theirs = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
    got = cpu_stream.randperm_prefix(ours, n, k)
    assert torch.equal(got, torch.randperm(n, generator=theirs)[:k])
    assert torch.equal(torch.rand(7, generator=ours), torch.rand(7, generator=theirs))


@pytest.mark.parametrize(("rows", "n", "k"), [(40, 6, 6), (25, 50, 50), (30, 9, 4), (200, 64, 2)])
def test_fisher_yates_prefix_equals_the_step_by_step_shuffle(rows: int, n: int, k: int) -> None:
    # Small n and k == n make steps hit the same positions often: long chains to resolve.
    draws = np.random.default_rng(rows * n + k).integers(0, 2**32, (rows, k))
    got = cpu_stream.fisher_yates_prefix(draws, n)
    for r in range(rows):
        assert got[r].tolist() == _shuffle_head(draws[r].tolist(), n, k), r


def test_words_advance_the_generator_as_torchs_own_draws() -> None:
    ours, theirs = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    drawn = cpu_stream.words(ours, 1500)  # across two twists of the 624-word state
    assert torch.equal(torch.from_numpy(drawn % 7), torch.randint(0, 7, (1500,), generator=theirs))
    cpu_stream.skip(ours, 10_000)
    torch.randint(0, 5, (10_000,), generator=theirs)
    assert torch.equal(torch.randn(9, generator=ours), torch.randn(9, generator=theirs))


CASES = [
    ((3, 5, 128), 1, torch.float32),
    ((4, 200), -1, torch.bfloat16),
    ((6, 2), 1, torch.float16),
    ((2, 3, 7), 2, torch.float32),
    ((5, 130), 0, torch.float32),
]


@pytest.mark.parametrize(("shape", "axis", "dtype"), CASES)
def test_cancel_pairs_at_once_equals_row_by_row(
    shape: tuple[int, ...], axis: int, dtype: torch.dtype, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = cancellation("cancel-pairs", 123, shape, dtype, axis)
    monkeypatch.setattr(adversarial.cpu_stream, "agrees_with_torch", lambda: False)
    slow = cancellation("cancel-pairs", 123, shape, dtype, axis)
    assert _digest(fast) == _digest(slow)


def test_cancel_pairs_values_are_pinned() -> None:
    # Digests and positions from the per-row loop before issue 19 (commit 1845ffb).
    assert _digest(cancellation("cancel-pairs", 123, (3, 5, 128), torch.float32, 1)) == (
        "23c534010f46a985"
    )
    assert _digest(cancellation("cancel-pairs", 123, (4, 200), torch.bfloat16)) == (
        "8db04e0a51069afd"
    )
    assert _digest(cancellation("cancel-pairs", 123, (6, 2), torch.float16, 1)) == (
        "d1dfa8fc4ff4cc9c"
    )
    x = cancellation("cancel-pairs", 7, (2, 130), torch.float32)
    big = x.abs() > 1000
    assert torch.nonzero(big).tolist() == [
        [0, 2], [0, 24], [0, 99], [0, 112], [1, 54], [1, 64], [1, 69], [1, 71]
    ]  # fmt: skip
    assert (x[big] / 2.0**24).tolist() == [2.0, -1.0, 1.0, -2.0, -2.0, 2.0, -2.0, 2.0]


def test_scattered_specials_are_pinned_and_equal_the_whole_permutation() -> None:
    values = torch.arange(3 * 700, dtype=torch.float32).reshape(3, 700)
    got = inject(values, "nan", 99, Density.SCATTERED)
    g = torch.Generator().manual_seed(99)
    positions = torch.randperm(values.numel(), generator=g)[: values.numel() // 100]
    assert torch.equal(torch.nonzero(got.isnan().reshape(-1)).flatten(), positions.sort().values)
    assert _digest(got) == "e32304a3dc700b3f"  # before issue 19 (commit 1845ffb)
    assert _digest(inject(values, "mixed", 99, Density.WHOLE_ROW)) == "c3c47c485e7116f6"
    assert _digest(inject(values, "+inf", 99, Density.ONE_PER_ROW)) == "d188649875b836fe"
