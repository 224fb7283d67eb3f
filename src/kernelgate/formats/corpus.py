"""The common record of every corpus format, and the choice of reader for a SOURCE.

An audit re-judges kernels that some earlier harness already accepted. Corpora arrive in
different shapes (CUDA-L1 JSON Lines, KernelBench run folders, plain folders of pairs);
each reader turns its shape into ``CorpusRecord`` values, so the runner, the store and the
report never need to know where a record came from.

A record that cannot be read (a malformed line, an empty candidate, a reference that is
missing) is still yielded, with ``unreadable`` set to the reason: the audit reports it as a
row instead of stopping, and a corpus's holes show up in the report.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelgate.errors import KernelgateError

FORMATS = ("cuda-l1", "kernelbench-run", "pairs", "problem")


@dataclass(frozen=True)
class CorpusRecord:
    """One (reference, candidate) pair as a corpus holds it.

    Either the path or the source of each side is set: readers of on-disk corpora keep the
    paths (so replay commands point at the user's files), readers of bundled corpora keep
    the sources (the judge writes them to files, since ``verify`` takes paths).
    """

    id: str
    format: str
    source_ids: dict[str, Any] = field(default_factory=dict)  # the format's own ids
    reference_path: str | None = None
    candidate_path: str | None = None
    reference_source: str | None = None
    candidate_source: str | None = None
    source_verdict: str | None = None  # what the source harness recorded, when it says
    unreadable: str | None = None  # why the record could not be read; None when it could

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CorpusRecord:
        return cls(**data)


def readable_text(path: Path, role: str) -> str | None:
    """Why ``path`` cannot serve as the ``role`` file, or None when it reads as text.

    Checked when the corpus is read, so a broken file is an ``unreadable`` row rather than a
    load failure blamed on the candidate.
    """
    if not path.is_file():
        return f"{role} file not found: {path}"
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        return f"cannot read {role} file {path}: {exc}"
    if not text.strip():
        return f"{role} file {path} is empty"
    return None


def unique_ids(records: Iterable[CorpusRecord]) -> Iterator[CorpusRecord]:
    """Make ids unique (``id~2``, ``id~3``) so the store's primary key never collides.

    Ids are deterministic in corpus order, which is what lets ``--resume`` match a row to
    its record.
    """
    seen: dict[str, int] = {}
    for record in records:
        count = seen.get(record.id, 0) + 1
        seen[record.id] = count
        if count == 1:
            yield record
        else:
            data = record.to_dict() | {"id": f"{record.id}~{count}"}
            yield CorpusRecord.from_dict(data)


KERNEL_FILE = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py$")


def detect_format(source: Path) -> str:
    """Guess the format of SOURCE from its shape; a usage error if nothing fits."""
    if source.is_file():
        if source.suffix == ".jsonl":
            return "cuda-l1"
        raise KernelgateError(
            f"cannot tell the format of {source}: a file SOURCE must be CUDA-L1 JSON Lines "
            "(.jsonl); pass --format to say what it is"
        )
    if not source.is_dir():
        raise KernelgateError(f"audit source not found: {source}")
    names = [p.name for p in source.iterdir()]
    if any(KERNEL_FILE.match(name) for name in names):
        return "kernelbench-run"
    if any(name.endswith(".jsonl") for name in names):
        return "cuda-l1"
    return "pairs"


def read_corpus(
    source: Path, fmt: str = "auto", *, problems: Path | None = None
) -> list[CorpusRecord]:
    """All records of SOURCE in a stable order, with unique ids."""
    if fmt == "auto":
        fmt = detect_format(source)
    if not source.exists():
        raise KernelgateError(f"audit source not found: {source}")
    if fmt == "cuda-l1":
        from kernelgate.formats.cuda_l1 import read_cuda_l1

        records: Iterable[CorpusRecord] = read_cuda_l1(source)
    elif fmt == "kernelbench-run":
        from kernelgate.formats.kernelbench_run import read_kernelbench_run

        if problems is None:
            raise KernelgateError(
                "a KernelBench run holds only candidates: pass --problems DIR, the KernelBench "
                "problem folder (with level1/, level2/, ...) its references come from"
            )
        records = read_kernelbench_run(source, problems)
    elif fmt == "pairs":
        from kernelgate.formats.pairs import read_pairs

        records = read_pairs(source)
    elif fmt == "problem":
        from kernelgate.formats.problem import read_problem_runs

        records = read_problem_runs(source)
    else:
        raise KernelgateError(f"unknown corpus format {fmt!r}; known: auto, {', '.join(FORMATS)}")
    return list(unique_ids(records))
