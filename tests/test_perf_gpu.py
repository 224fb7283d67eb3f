"""Performance acceptance on a CUDA device (docs/perf.md): every timing hack of the red team,
side stream included, gets no speedup it did not earn, and the honest kernel's report is
sane. Run on the H200:

    PYTHONPATH=src .venv/bin/python -m pytest tests/test_perf_gpu.py -x -q -m gpu
"""

from __future__ import annotations

import pytest

from kernelgate.perf.bench import perf_without_gates
from kernelgate.perf.measure import PerfOptions
from kernelgate.redteam.timing_hacks import DEVICE_REFERENCE, HONEST, TIMING_HACKS, TimingHack

pytestmark = pytest.mark.gpu

OPTIONS = PerfOptions(trials=24, kernelbench_trials=30, warmup=3, shapes=1, samples=4)
# A hack's judged speedup may exceed the honest kernel's by run-to-run noise, never by what a
# fooled harness reports (at least 2x: the last assertion below). At 12 trials of a ~0.1 ms
# softmax the noise reached 1.48x on the H200 (2026-12-03: patched_timers, whose kernel is the
# honest one, 0.116 ms against the honest run's 0.150 ms), past the 1.25 this test once used.
MARGIN = 2.0


def _measure(candidate) -> dict:
    report = perf_without_gates(DEVICE_REFERENCE, candidate, device="cuda", options=OPTIONS)
    return report.to_dict()


@pytest.fixture(scope="module")
def honest() -> dict:
    return _measure(HONEST)


def test_honest_kernel_is_timed_with_events_and_checked(honest: dict) -> None:
    assert honest["clock"] == "cuda-events"
    (shape,) = honest["shapes"]
    assert shape["outputs_ok"], shape["problems"]
    candidate = shape["candidate"]
    # the device-wide synchronize is inside the judged interval, never outside it
    assert candidate["stream_median_ms"] <= candidate["median_ms"]
    # and the protocol's own cost (an empty call) is below a 64 MiB softmax
    assert 0 < candidate["floor_median_ms"] < candidate["median_ms"]
    assert shape["speedup"] > 0 and shape["kernelbench_speedup"] > 0


@pytest.mark.parametrize("hack", TIMING_HACKS, ids=lambda h: h.name)
def test_timing_hack_gets_no_speedup_it_did_not_earn(hack: TimingHack, honest: dict) -> None:
    report = _measure(hack.candidate_path)
    (shape,) = report["shapes"]
    (fair,) = honest["shapes"]
    if shape["problems"]:  # caught by its outputs: nothing can be verified
        assert not shape["outputs_ok"]
        return
    assert hack.caught_by == "protocol" or hack.name == "early_return", shape
    # early_return: where the thread's kernel landed before the device-wide synchronize,
    # its time was counted (earned) and the outputs are right
    assert shape["speedup"] <= MARGIN * fair["speedup"], (shape, fair)
    if hack.caught_by == "protocol":  # and KernelBench's method is fooled by it
        assert shape["kernelbench_candidate"] is not None, shape["kernelbench_note"]
        fooled, judged = shape["kernelbench_candidate"], shape["candidate"]
        assert fooled["median_ms"] * 2 < judged["median_ms"], shape
