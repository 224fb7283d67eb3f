"""A plain folder of (reference, candidate) pairs.

Accepted layouts, which may be mixed in one folder:

- a subfolder per pair: ``<name>/reference.py`` and ``<name>/candidate.py``;
- flat files: ``<name>_ref.py`` and ``<name>_new.py``, or ``<name>_reference.py`` and
  ``<name>_candidate.py``.

The record id is ``<name>``. A reference without a candidate (or the other way round) is an
``unreadable`` record, so a half-copied corpus shows up in the report instead of vanishing.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from kernelgate.formats.corpus import CorpusRecord, readable_text

FORMAT = "pairs"
FLAT_SUFFIXES = {
    "_ref.py": "reference",
    "_reference.py": "reference",
    "_new.py": "candidate",
    "_candidate.py": "candidate",
}


def _pairs(folder: Path) -> dict[str, dict[str, Path]]:
    pairs: dict[str, dict[str, Path]] = {}
    for path in sorted(folder.iterdir()):
        if path.is_dir():
            sides = {
                role: path / f"{role}.py"
                for role in ("reference", "candidate")
                if (path / f"{role}.py").exists()
            }
            if sides:
                pairs.setdefault(path.name, {}).update(sides)
            continue
        for suffix, role in FLAT_SUFFIXES.items():
            if path.name.endswith(suffix) and len(path.name) > len(suffix):
                pairs.setdefault(path.name[: -len(suffix)], {})[role] = path
                break
    return pairs


def read_pairs(folder: Path) -> Iterator[CorpusRecord]:
    """Yield one record per pair name, in name order."""
    for name, sides in sorted(_pairs(folder).items()):
        reference, candidate = sides.get("reference"), sides.get("candidate")
        if reference is None or candidate is None:
            missing = "reference" if reference is None else "candidate"
            problem: str | None = f"pair {name!r} has no {missing} file"
        else:
            problem = readable_text(reference, "reference") or readable_text(candidate, "candidate")
        yield CorpusRecord(
            name,
            FORMAT,
            {"name": name},
            reference_path=str(reference) if reference else None,
            candidate_path=str(candidate) if candidate else None,
            unreadable=problem,
        )
