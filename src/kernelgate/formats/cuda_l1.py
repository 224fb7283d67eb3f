"""CUDA-L1 corpora: JSON Lines, one accepted kernel per line.

Fields used: ``level_id``, ``task_id``, ``ref_code`` (the KernelBench reference) and
``custom_code`` (the accepted ``ModelNew``; empty in some records). Every record of the
corpus was accepted by the source's own harness, so ``source_verdict`` is "accepted".
SOURCE is one ``.jsonl`` file or a folder of them (read in name order).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from kernelgate.formats.corpus import CorpusRecord

FORMAT = "cuda-l1"


def _record(corpus: str, line_number: int, line: str) -> CorpusRecord:
    fallback_id = f"{corpus}/line{line_number}"
    ids: dict[str, object] = {"file": corpus, "line": line_number}
    try:
        data = json.loads(line)
    except json.JSONDecodeError as exc:
        return CorpusRecord(fallback_id, FORMAT, ids, unreadable=f"not valid JSON: {exc}")
    if not isinstance(data, dict):
        return CorpusRecord(fallback_id, FORMAT, ids, unreadable="line is not a JSON object")
    level, task = data.get("level_id"), data.get("task_id")
    record_id = f"{corpus}/L{level}/T{task}" if level is not None and task is not None else None
    ids |= {"level": level, "task": task}
    reference, candidate = data.get("ref_code"), data.get("custom_code")
    problem = None
    if record_id is None:
        problem = "missing level_id or task_id"
    elif not isinstance(reference, str) or not reference.strip():
        problem = "empty reference (ref_code)"
    elif not isinstance(candidate, str) or not candidate.strip():
        problem = "empty candidate (custom_code is empty)"
    return CorpusRecord(
        record_id or fallback_id,
        FORMAT,
        ids,
        reference_source=reference if isinstance(reference, str) else None,
        candidate_source=candidate if isinstance(candidate, str) else None,
        source_verdict="accepted",
        unreadable=problem,
    )


def read_cuda_l1(source: Path) -> Iterator[CorpusRecord]:
    """Yield one record per non-blank line of each ``.jsonl`` file of SOURCE."""
    files = sorted(source.glob("*.jsonl")) if source.is_dir() else [source]
    for path in files:
        try:
            lines = path.read_text().splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            yield CorpusRecord(
                f"{path.stem}/file", FORMAT, {"file": path.stem}, unreadable=f"cannot read: {exc}"
            )
            continue
        for number, line in enumerate(lines, start=1):
            if line.strip():
                yield _record(path.stem, number, line)
