"""benchmarks/judge_profile.py and the judge's profiling switch (audit/judge.py)."""

from __future__ import annotations

import cProfile
import time
from pathlib import Path

import pytest

from kernelgate.audit import judge

from .conftest import load_benchmark


def _module():
    return load_benchmark("judge_profile")


def _busy(seconds: float) -> int:
    end, n = time.process_time() + seconds, 0
    while time.process_time() < end:
        n += 1
    return n


def test_profiles_of_several_judges_are_summed_and_ranked(tmp_path: Path) -> None:
    for name, seconds in (("a", 0.15), ("b", 0.25)):
        profiler = cProfile.Profile(time.process_time)
        profiler.runcall(_busy, seconds)
        profiler.dump_stats(str(tmp_path / f"{name}.prof"))
    summary = _module().summarize(tmp_path, top=5)
    assert summary["records"] == 2
    assert summary["judge_cpu_s"] == pytest.approx(0.4, abs=0.1)
    first = summary["by_cumulative_time"][0]
    assert "_busy" in first["where"] and first["calls"] == 2 and first["share"] > 0.8


def test_an_empty_folder_says_what_to_set(tmp_path: Path) -> None:
    import typer

    with pytest.raises(typer.BadParameter, match="KERNELGATE_PROFILE_JUDGES"):
        _module().summarize(tmp_path)


def test_the_judge_writes_its_profile_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(judge.PROFILE_JUDGES_ENV, raising=False)
    with judge._profiled("off"):
        _busy(0.01)
    assert not list(tmp_path.iterdir())
    monkeypatch.setenv(judge.PROFILE_JUDGES_ENV, str(tmp_path / "profiles"))
    with judge._profiled("rec-1"):
        _busy(0.05)
    assert (tmp_path / "profiles" / "rec-1.prof").is_file()
