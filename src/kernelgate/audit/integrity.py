"""Whether each record's evidence file is still what its judge wrote (issue 18).

Every judged row carries ``evidence_sha256``: the SHA-256 of its ``verdict.json`` as the
judge wrote it, once every process of the verification was gone, checked again by the
audit when it stored the row (``judge.ingested``). Before any report is written, each
evidence file is digested once more and compared with its row:

- ``verified``: the bytes are those judged.
- ``changed``: they are not. The report is refused (``EvidenceChanged``): a report that
  links forged evidence, or one that quietly leaves those records out (its rates would
  shift with nothing to show why), is worse than none; the message names every such record
  and the command that judges it again.
- ``missing``: a digest was recorded but the file is gone (an output folder carried without
  its ``records/``). Nothing forged can be read from an absent file, so the report is
  written and names these records at its top.
- ``unverifiable``: the row points to evidence but records no digest (a store written
  before digests were kept). Reported as such at the top, never counted as verified.
- ``none``: the record has no evidence file (unreadable, a load failure, a judge error).

The digest guards the evidence files, not the store itself: whoever can write
``audit.sqlite`` can write a matching digest too. Keeping a candidate's processes away from
the audit folder altogether is the worker's confinement's part.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelgate.audit.judge import evidence_path
from kernelgate.errors import KernelgateError
from kernelgate.evidence_io import sha256_file

VERIFIED, CHANGED, MISSING, UNVERIFIABLE, NONE = (
    "verified",
    "changed",
    "missing",
    "unverifiable",
    "none",
)
SHOWN_DIGITS = 12  # of a digest, in messages


@dataclass
class ChangedEvidence:
    """One record whose evidence file is not what its judge wrote."""

    record_id: str
    path: Path
    recorded: str
    found: str  # the file's digest now, or why it could not be read


@dataclass
class EvidenceCheck:
    """Each row's evidence status (see the module's docstring), by record id."""

    status: dict[str, str] = field(default_factory=dict)
    changed: list[ChangedEvidence] = field(default_factory=list)

    def ids(self, status: str) -> list[str]:
        return [record_id for record_id, s in self.status.items() if s == status]

    def summary(self) -> dict[str, Any]:
        """The report's ``evidence_integrity`` entry: counts, and the ids not verified."""
        counts = {s: len(self.ids(s)) for s in (VERIFIED, CHANGED, MISSING, UNVERIFIABLE, NONE)}
        return {
            **counts,
            "missing_ids": self.ids(MISSING),
            "unverifiable_ids": self.ids(UNVERIFIABLE),
        }


def evidence_status(out_dir: Path, row: dict[str, Any]) -> tuple[str, ChangedEvidence | None]:
    """One row's status, and what changed if it did.

    The file is looked for in this audit folder's ``records/`` (the row's own path is the
    judging machine's, and the folder may have been carried elsewhere since).
    """
    if not row.get("evidence"):
        return NONE, None
    recorded = row.get("evidence_sha256")
    if not isinstance(recorded, str) or not recorded:
        return UNVERIFIABLE, None
    path = evidence_path(out_dir, row["id"])
    if not path.exists():
        return MISSING, None
    try:
        found = sha256_file(path)
    except OSError as exc:
        found = f"unreadable ({exc.strerror or exc})"
    if found == recorded:
        return VERIFIED, None
    return CHANGED, ChangedEvidence(row["id"], path, recorded, found)


def check_evidence(out_dir: Path, rows: list[dict[str, Any]]) -> EvidenceCheck:
    """Digest every row's evidence file again and compare (see the module's docstring)."""
    check = EvidenceCheck()
    for row in rows:
        status, changed = evidence_status(out_dir, row)
        check.status[row["id"]] = status
        if changed is not None:
            check.changed.append(changed)
    return check


class EvidenceChanged(KernelgateError):
    """Evidence files differ from the digests recorded when they were judged."""


def refuse_changed(check: EvidenceCheck, out_dir: Path, settings: dict[str, Any]) -> None:
    """Raise ``EvidenceChanged`` naming each changed record and how to judge it again."""
    if not check.changed:
        return
    lines = [
        f"{len(check.changed)} record(s) of {out_dir} have evidence that changed since they "
        "were judged, so no report was written (the files already there are from before):"
    ]
    for entry in check.changed:
        where = (
            entry.path.relative_to(out_dir) if entry.path.is_relative_to(out_dir) else entry.path
        )
        lines.append(
            f"  {entry.record_id!r}: {where} has sha256 {entry.found[:SHOWN_DIGITS]}, "
            f"judged as {entry.recorded[:SHOWN_DIGITS]}"
        )
    lines.append(
        "Something wrote into the audit folder after the judge (a process a candidate left "
        "running, or a person). Judge these records again, then write the report:"
    )
    lines.append("  " + rejudge_command(out_dir, settings, [c.record_id for c in check.changed]))
    lines.append(f"  kernelgate audit-report {shlex.quote(str(out_dir))}")
    raise EvidenceChanged("\n".join(lines))


def rejudge_command(out_dir: Path, settings: dict[str, Any], record_ids: list[str]) -> str:
    """``kernelgate audit ... --resume --rejudge-record ID ...`` with the audit's settings
    (add ``--workers``, ``--executor`` as the audit was run; they change no verdict)."""
    from kernelgate.audit.command import resume_command  # command imports the runner

    problems = settings.get("problems")
    resume = resume_command(
        Path(str(settings.get("source", "SOURCE"))),
        out_dir,
        fmt=str(settings.get("format") or "auto"),
        problems=Path(problems) if problems else None,
        device=str(settings.get("device") or "cpu"),
        workers=None,
        executor="local",
        ray_address=None,
        limit=None,
        timeout=float(settings.get("timeout") or 60.0),
        host_memory=None,
        only=settings.get("only"),
    )
    return resume + "".join(f" --rejudge-record {shlex.quote(i)}" for i in record_ids)
