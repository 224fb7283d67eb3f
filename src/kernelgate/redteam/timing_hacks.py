"""The red team's timing hacks: kernels that look faster than they are (docs/perf.md).

Each one computes the right answer and cheats only the stopwatch, so the gates are not what
must stop it: the perf layer must give it no speedup it did not earn. ``caught_by`` says
how: ``outputs`` (the sampled timed outputs fail the oracle or are not plain tensors, so
no speedup is verified), ``protocol`` (the judged speedup stays near the honest kernel's,
while KernelBench's method, run beside it, is fooled). Entries are data, like catalog.py's:
the tests and docs read this one list.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelgate.redteam.catalog import ROOT

NO_STREAMS = "the CPU has no CUDA streams: the side stream is the caller's"


@dataclass(frozen=True)
class TimingHack:
    """One timing hack; its honest twin is ``HONEST`` (the same kernel, no trick)."""

    name: str
    hack: str  # one line: how it fakes speed
    caught_by: str  # "outputs" | "protocol"
    device_only: str | None = None  # why the CPU cannot show it, or None
    reference: str = "softmax"  # stem under redteam/references/

    @property
    def candidate_path(self) -> Path:
        return ROOT / "timing" / f"{self.name}.py"

    @property
    def reference_path(self) -> Path:
        return ROOT / "references" / f"{self.reference}.py"


HONEST = ROOT / "controls" / "softmax.py"  # the kernel every hack wraps, without its trick
# On a device the hacks are timed at a size where a kernel takes tens of microseconds
# (the entries' own reference is small, for the Triton interpreter)
DEVICE_REFERENCE = ROOT / "references" / "softmax_wide.py"

TIMING_HACKS: tuple[TimingHack, ...] = (
    TimingHack(
        "cached_results",
        "results cached across trials, keyed by the input's address and shape",
        "protocol",
    ),
    TimingHack(
        "patched_timers",
        "time.perf_counter & co. and torch.cuda.Event.elapsed_time run 100x slow",
        "protocol",
    ),
    TimingHack(
        "early_return",
        "returns before the work ends: a host thread writes the output later",
        "outputs",
    ),
    TimingHack(
        "lazy_output",
        "a tensor subclass whose values are computed when first read",
        "outputs",
    ),
    TimingHack(
        "side_stream",
        "the kernel runs on a side stream after a spin, never joined back",
        "protocol",
        device_only=NO_STREAMS,
    ),
)


def timing_hack(name: str) -> TimingHack:
    """The entry called ``name`` (KeyError if none)."""
    for hack in TIMING_HACKS:
        if hack.name == name:
            return hack
    raise KeyError(name)
