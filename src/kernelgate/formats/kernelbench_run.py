"""KernelBench run folders: generated candidates plus the run's ``eval_results.json``.

A run folder (``runs/<run>/``) holds ``level_<L>_problem_<P>_sample_<S>_kernel.py`` files;
the references come from a KernelBench problem folder (``--problems``): either the dataset
folder with ``level1/``, ``level2/``, ... inside, or one level folder, each holding
``<P>_<Name>.py``. ``eval_results.json`` (optional) gives the source harness's verdict per
problem and sample; it maps a problem id to one entry, a list of entries, or a table keyed by
sample id, each entry with ``sample_id`` and ``correctness``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kernelgate.formats.corpus import KERNEL_FILE, CorpusRecord, readable_text

FORMAT = "kernelbench-run"


def _entries(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, list):
        return [v for v in value if isinstance(v, dict)]
    if isinstance(value, dict) and "correctness" in value:
        return [value]
    if isinstance(value, dict):
        return [
            v | {"sample_id": v.get("sample_id", k)}
            for k, v in value.items()
            if isinstance(v, dict)
        ]
    return []


def source_verdicts(run: Path) -> dict[tuple[int, int], str]:
    """(problem, sample) -> "accepted"/"rejected", from the run's ``eval_results.json``."""
    path = run / "eval_results.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    verdicts: dict[tuple[int, int], str] = {}
    if not isinstance(data, dict):
        return verdicts
    for problem, value in data.items():
        for entry in _entries(value):
            try:
                key = (int(problem), int(entry.get("sample_id", 0)))
            except (TypeError, ValueError):
                continue
            verdicts[key] = "accepted" if entry.get("correctness") is True else "rejected"
    return verdicts


def find_reference(problems: Path, level: int, problem: int) -> Path | None:
    """The reference file of ``problem`` in level ``level`` of a KernelBench problem folder."""
    for folder in (problems / f"level{level}", problems):
        if folder.is_dir():
            matches = sorted(folder.glob(f"{problem}_*.py"))
            if matches:
                return matches[0]
    return None


def read_kernelbench_run(run: Path, problems: Path) -> Iterator[CorpusRecord]:
    """Yield one record per kernel file of the run, ordered by level, problem, sample."""
    verdicts = source_verdicts(run)
    kernels = []
    for path in run.iterdir():
        match = KERNEL_FILE.match(path.name)
        if match:
            level, problem, sample = (int(g) for g in match.groups())
            kernels.append((level, problem, sample, path))
    for level, problem, sample, path in sorted(kernels):
        ids = {"run": run.name, "level": level, "problem": problem, "sample": sample}
        reference = find_reference(problems, level, problem)
        problem_text = (
            f"no reference for level {level} problem {problem} in {problems}"
            if reference is None
            else readable_text(reference, "reference") or readable_text(path, "candidate")
        )
        yield CorpusRecord(
            f"{run.name}/L{level}/P{problem}/S{sample}",
            FORMAT,
            ids,
            reference_path=str(reference) if reference else None,
            candidate_path=str(path),
            source_verdict=verdicts.get((problem, sample)),
            unreadable=problem_text,
        )
