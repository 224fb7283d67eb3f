"""benchmarks/judge_memory.py: per-gate peaks from the process's high-water mark."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import load_benchmark

MIB = 1 << 20


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_each_phase_gets_its_own_peak() -> None:
    memory = load_benchmark("judge_memory")
    with memory.GatePeaks() as peaks:
        peaks.on_gate("CMP-01", None)
        block = b"\x01" * (200 * MIB)  # written, so resident while CMP-01 runs
        del block
        peaks.on_gate("CMP-01", object())
        peaks.on_gate("EXC-02", None)
        peaks.on_gate("EXC-02", object())
    assert list(peaks.peaks) == ["setup", "CMP-01", "after CMP-01", "EXC-02", "after EXC-02"]
    assert peaks.peaks["CMP-01"] >= peaks.peaks["EXC-02"] + 150 * MIB, (
        "the allocation counts in its own phase, and the mark was reset after it"
    )
    figures = memory.per_element(peaks.peaks, peaks.peaks["EXC-02"], 1 << 20)
    assert figures["EXC-02"] == 0.0 and figures["CMP-01"] >= 150.0
