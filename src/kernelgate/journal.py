"""The gates a verification has finished, on disk, so that a judge killed mid-record resumes
at the next gate instead of the first.

Why: an audit on a leased device runs in calls of a few minutes, and a record at CUDA-L1's
enlarged sizes can take longer than one call to judge. Without a journal such a record is
started afresh in every call and never finishes. Gates are seeded by their own id (see
``GateContext.case_seed``), so a gate's result does not depend on which gates ran before it
in the same process; what does carry from gate to gate (the execution incidents RES-01
reports, and a hang that halts the later gates) is journaled with each gate.

A journal belongs to one (reference, candidate, device, seed, timeout, kernelgate code)
combination, its ``key``: a journal written for anything else is discarded, never reused.
A gate whose candidate calls ran out of device memory ends the usable part of a journal:
such a record is judged again with fewer judges beside it, and that gate must run again.

The journal is written by the judge, not the worker; like every file the judge writes next
to a candidate it is only as safe as the file system the candidate could reach.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelgate.evidence_io import write_atomic
from kernelgate.gates.base import GateResult, Incident

JOURNAL_SCHEMA = "kernelgate.gate-journal/1"

# What CUDA, cuDNN and cuBLAS say when an allocation fails (the audit's retry rule reads the
# same signs). cuDNN's "internal error" is what a convolution reports when its workspace
# cannot be allocated on a full GPU; the last phrase is the tail of PyTorch's out-of-memory
# message, all a one-line reason may keep of it.
DEVICE_MEMORY_SIGNS = re.compile(
    r"OutOfMemoryError|out of memory|cudaErrorMemoryAllocation|CUDNN_STATUS_ALLOC_FAILED"
    r"|CUDNN_STATUS_INTERNAL_ERROR|CUBLAS_STATUS_ALLOC_FAILED|is allocated by PyTorch"
)


def journal_key(reference: Path, candidate: Path, **settings: Any) -> str:
    """What a journal's gates were judged on: both programs' bytes and the settings."""
    digest = hashlib.sha256()
    for path in (reference, candidate):
        digest.update(path.read_bytes())
        digest.update(b"\0")
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    return digest.hexdigest()


@dataclass
class GateJournal:
    """Finished gates of one verification, one JSON line each, after a header with the key."""

    path: Path
    key: str
    resumed: list[str] = field(default_factory=list)  # gates taken from the journal

    def load(self) -> tuple[dict[str, GateResult], list[Incident], str | None]:
        """The usable gates, the incidents they saw and the halt they caused, if any.

        A journal with another key, or none, is started afresh. A torn last line (the judge
        was killed while writing it) and everything from the first gate that ran out of
        device memory on are dropped and the file rewritten without them.
        """
        entries = self._read()
        if entries is None:
            self._write([])
            return {}, [], None
        kept: list[dict[str, Any]] = []
        for entry in entries:
            incidents = entry.get("incidents", [])
            if any(DEVICE_MEMORY_SIGNS.search(str(i.get("detail"))) for i in incidents):
                break
            kept.append(entry)
        self._write(kept)  # without a torn line, or what followed a memory failure
        gates = {e["gate"]["id"]: GateResult.from_dict(e["gate"]) for e in kept}
        incidents = [Incident.from_dict(i) for e in kept for i in e.get("incidents", [])]
        halted = next((e["halted"] for e in reversed(kept) if e.get("halted")), None)
        self.resumed = list(gates)
        return gates, incidents, halted

    def record(self, result: GateResult, incidents: list[Incident], halted: str | None) -> None:
        """Append one finished gate with the incidents of its own runs (flushed to disk)."""
        line = {
            "gate": result.to_dict(),
            "incidents": [i.to_dict() for i in incidents],
            "halted": halted,
        }
        with self.path.open("a") as stream:
            stream.write(json.dumps(line) + "\n")
            stream.flush()
            os.fsync(stream.fileno())

    def discard(self) -> None:
        """Remove the journal (its verdict is written: nothing is left to resume)."""
        self.path.unlink(missing_ok=True)

    def _read(self) -> list[dict[str, Any]] | None:
        try:
            lines = self.path.read_text().splitlines()
        except (OSError, UnicodeDecodeError):
            return None
        entries: list[dict[str, Any]] = []
        for number, line in enumerate(lines):
            try:
                data = json.loads(line)
            except ValueError:
                break  # torn by a kill mid-write: the rest is not to be trusted
            if number == 0:
                if data != {"schema": JOURNAL_SCHEMA, "key": self.key}:
                    return None
                continue
            if not isinstance(data, dict) or not isinstance(data.get("gate"), dict):
                break
            entries.append(data)
        return entries if lines else None

    def _write(self, entries: list[dict[str, Any]]) -> None:
        """Rewrite the journal whole (``write_atomic``): a kill mid-rewrite keeps the old one."""
        header = json.dumps({"schema": JOURNAL_SCHEMA, "key": self.key})
        lines = [header, *(json.dumps(entry) for entry in entries)]
        write_atomic(self.path, "".join(line + "\n" for line in lines))
