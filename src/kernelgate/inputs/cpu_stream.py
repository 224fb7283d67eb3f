"""Bulk draws from torch's CPU generator, word for word as torch's own samplers make them.

torch's CPU generator is a 32-bit Mersenne Twister (MT19937). Some of the judge's seeded
inputs were defined by loops over it: one ``torch.randperm`` per row of an ORD-01
cancellation input (262,144 calls and 21 s for KernelBench's 67M-element RMSNorm), or a
whole permutation of which only a prefix is used (EXC-01's scattered positions: a
67M-element ``randperm`` for 670k positions). Those values are evidence (a seed replays a
counterexample, and a changed value can change a verdict), so a faster version must give
the same values and leave the generator in the same state for the draws that follow.

Here the generator's state is handed to numpy's MT19937 (the same algorithm, with a bulk
``random_raw``), the 32-bit words are drawn there, and the advanced state is written back.
On that stream, as torch's CPU kernels consume it:

- ``torch.randperm(n)`` (for ``n`` below ``RANDPERM_SWAP_LIMIT``) is a forward
  Fisher-Yates shuffle of ``0..n-1``: word ``i`` (of ``n - 1``) swaps position ``i`` with
  ``i + word % (n - i)``;
- ``torch.randint(low, high, ...)`` with ``high - low < 2**32`` takes one word per element,
  ``low + word % (high - low)``, in order.

``agrees_with_torch()`` checks all of this against torch itself, once per process (the
state's byte layout included). Where it does not hold (another torch), callers keep using
torch's own calls, which give the same values, only slower.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

# torch.randperm on the CPU shuffles forward (above) only for n < 2**32 / 20; above that
# it runs an inside-out shuffle on 64-bit words, whose prefix is known only at the end.
RANDPERM_SWAP_LIMIT = (2**32 - 1) // 20
# Words drawn at a time when they are only skipped over (64 MiB of numpy's uint64 words).
SKIP_CHUNK = 1 << 23

# Byte layout of torch's CPU generator state (``CPUGeneratorImplState``): a legacy header
# of the initial seed (uint64), ``left`` (int32), ``seeded`` (int32) and ``next`` (uint64),
# then the 624 state words, each stored in a uint64, then fields this module leaves alone.
_STATE_BYTES = 5056
_LEFT = slice(8, 12)
_NEXT = slice(16, 24)
_WORDS = slice(24, 24 + 624 * 8)
_MT_N = 624


def _to_numpy(generator: torch.Generator) -> np.random.MT19937:
    """numpy's MT19937 at the state of torch's CPU ``generator``.

    torch draws word ``next`` after decrementing ``left`` and twisting when it reaches 0;
    numpy draws word ``pos`` and twists first when ``pos`` is 624. A fresh torch generator
    has ``left == 1`` (twist before the first word), the same as ``pos == 624``.
    """
    state = generator.get_state().numpy()
    left = int(state[_LEFT].view(np.int32)[0])
    position = int(state[_NEXT].view(np.uint64)[0])
    bit_generator = np.random.MT19937()
    bit_generator.state = {
        "bit_generator": "MT19937",
        "state": {
            "key": state[_WORDS].view(np.uint64).astype(np.uint32),
            "pos": _MT_N if left == 1 else position,
        },
    }
    return bit_generator


def _write_back(generator: torch.Generator, bit_generator: np.random.MT19937) -> None:
    """Set torch's ``generator`` to ``bit_generator``'s state (its other fields as they are)."""
    state = generator.get_state().numpy().copy()
    mt = bit_generator.state["state"]
    position = int(mt["pos"])
    state[_LEFT] = np.array([_MT_N + 1 - position], dtype=np.int32).view(np.uint8)
    state[_NEXT] = np.array([position], dtype=np.uint64).view(np.uint8)
    state[_WORDS] = np.asarray(mt["key"], dtype=np.uint64).view(np.uint8)
    generator.set_state(torch.from_numpy(state))


def words(generator: torch.Generator, count: int) -> np.ndarray:
    """The next ``count`` 32-bit words of torch's CPU ``generator`` (int64), which advances
    past them exactly as ``count`` draws of torch's own samplers would move it."""
    bit_generator = _to_numpy(generator)
    drawn = bit_generator.random_raw(count).astype(np.int64)
    _write_back(generator, bit_generator)
    return drawn


def skip(generator: torch.Generator, count: int) -> None:
    """Advance torch's CPU ``generator`` past ``count`` words, drawing them in chunks."""
    bit_generator = _to_numpy(generator)
    for start in range(0, count, SKIP_CHUNK):
        bit_generator.random_raw(min(SKIP_CHUNK, count - start))
    _write_back(generator, bit_generator)


def fisher_yates_prefix(draws: np.ndarray, n: int) -> np.ndarray:
    """The first ``k`` values of one forward Fisher-Yates shuffle of ``0..n-1`` per row of
    ``draws`` (``rows x k`` words, ``k <= n``; the word of step ``n - 1``, if asked for, is
    ignored: that step has one choice), without materialising any permutation.

    Step ``i`` swaps positions ``i`` and ``t_i = i + word_i % (n - i)``, and no later step
    touches position ``i`` again, so the result at ``i`` is what position ``t_i`` held just
    before step ``i``. A position ``p`` changes only as the target of a step ``j`` (it then
    holds what position ``j`` held before step ``j``), so what ``t_i`` holds is: if an
    earlier step ``j`` targeted it, the latest such ``j``'s "before" value, else ``t_i``
    itself. The "before" value of ``j`` follows the same rule for position ``j``; those
    chains are resolved by pointer jumping, all rows and steps at once.
    """
    rows, k = draws.shape
    if k == 0 or rows == 0:
        return np.zeros((rows, k), dtype=np.int64)
    steps = np.arange(k, dtype=np.int64)
    target = steps + draws.astype(np.int64) % np.maximum(n - steps, 1)
    row_start = np.arange(rows, dtype=np.int64)[:, None] * n
    flat = np.arange(rows * k, dtype=np.int64).reshape(rows, k)
    # Every (row, step) keyed by the global position it targets, then by step: the steps
    # that target one position are adjacent, in order, after sorting.
    keyed = ((row_start + target) * k + steps).ravel()
    order = np.argsort(keyed)
    ordered = keyed[order]
    ordered_position, ordered_step = ordered // k, ordered % k
    # The latest earlier step that targeted the same position (-1: none).
    previous = np.full(rows * k, -1, dtype=np.int64)
    repeat = ordered_position[1:] == ordered_position[:-1]
    previous[order[1:][repeat]] = ordered_step[:-1][repeat]
    previous = previous.reshape(rows, k)
    # The latest step before j that targeted position j itself (-1: none).
    own_position = (row_start + steps).ravel()
    found = np.searchsorted(ordered, own_position * k + np.tile(steps, rows)) - 1
    hit = (found >= 0) & (ordered_position[np.maximum(found, 0)] == own_position)
    source = np.where(hit, ordered_step[np.maximum(found, 0)], -1).reshape(rows, k)
    # Pointer jumping to each chain's root: a step whose position no earlier step targeted
    # holds its own index there before it runs.
    root = np.where(source >= 0, flat - steps + source, flat).ravel()
    while True:
        jumped = root[root]
        if np.array_equal(jumped, root):
            break
        root = jumped
    before = (root % k).reshape(rows, k)
    earlier = np.take_along_axis(before, np.maximum(previous, 0), axis=1)
    return np.where(previous >= 0, earlier, target)


def randperm_prefix(generator: torch.Generator, n: int, k: int) -> torch.Tensor:
    """``torch.randperm(n, generator=generator)[:k]``, leaving ``generator`` where that call
    leaves it, in O(k log k) work and memory besides skipping ``n - 1`` words."""
    k = min(k, n)
    if n < 2 or n >= RANDPERM_SWAP_LIMIT or not agrees_with_torch():
        return torch.randperm(n, generator=generator)[:k]
    return randperm_prefix_unchecked(generator, n, k)


@functools.cache
def agrees_with_torch() -> bool:
    """Whether this torch's CPU generator and samplers are the ones modelled here: the state
    layout, ``randperm``'s forward shuffle and ``randint``'s one word per element, and a
    round trip through numpy that leaves the generator where torch's own draws would."""
    try:
        probe = torch.Generator().manual_seed(20240917)
        if probe.get_state().numel() != _STATE_BYTES:
            return False
        for n, k, low, high in ((2, 2, 0, 3), (5, 3, -4, 9), (97, 7, 0, 3), (4099, 100, 1, 2)):
            ours, theirs = torch.Generator().manual_seed(n), torch.Generator().manual_seed(n)
            torch.rand(3, generator=ours, dtype=torch.float64)  # a stream not at a twist
            torch.rand(3, generator=theirs, dtype=torch.float64)
            prefix = randperm_prefix_unchecked(ours, n, k)
            ints = low + torch.from_numpy(words(ours, 11)) % (high - low)
            if not torch.equal(prefix, torch.randperm(n, generator=theirs)[:k]):
                return False
            if not torch.equal(ints, torch.randint(low, high, (11,), generator=theirs)):
                return False
            if not torch.equal(torch.rand(5, generator=ours), torch.rand(5, generator=theirs)):
                return False
    except (RuntimeError, ValueError, TypeError, KeyError):
        return False
    return True


def randperm_prefix_unchecked(generator: torch.Generator, n: int, k: int) -> torch.Tensor:
    """``randperm_prefix`` without the check against torch (what the check itself runs);
    ``2 <= n < RANDPERM_SWAP_LIMIT``."""
    k = min(k, n)
    prefix_words = min(k, n - 1)
    drawn = words(generator, prefix_words)
    skip(generator, n - 1 - prefix_words)
    draws = np.zeros((1, k), dtype=np.int64)
    draws[0, :prefix_words] = drawn
    return torch.from_numpy(fisher_yates_prefix(draws, n)[0])
