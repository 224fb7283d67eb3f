"""Verdicts reused across audits of corpora that share (reference, candidate) pairs.

The five CUDA-L1 files hold 498 distinct pairs in 1,250 records: judging a pair a second
time on the same code, settings and machine gives the same row, at device hours we do not
have. ``kernelgate audit --reuse OTHER_OUT`` (repeatable) therefore looks up each record
before judging it among the rows of earlier audits' stores, and the audit's own (a pair
that occurs twice in one corpus, or a resume); a row is reused only where its identity
(``identity.reuse_key``: the bytes judged, format, settings, code, environment) equals the
record's, and only a final row (a verdict, not an error, a memory failure or a row whose
evidence no longer matches its digest).

A reused row keeps the judged parts of the row it copies and takes its identity from the
record it now stands for: id, format, source ids, the corpus's own verdict (``source_verdict``),
its position in the store, and the paths (reference, candidate, replays, evidence) of this
audit's record folder. It says where it came from: ``reused_from`` = {audit, source, id}.

The evidence file is copied into this audit's record folder, not pointed to in the other
audit's: the report's integrity check (``integrity.py``) and its replays look in the
audit folder's own ``records/`` (a folder carried to another machine stays whole), and an
earlier audit's folder may be moved or deleted once its rows are reused. The copy's digest
is checked against the row's ``evidence_sha256`` before the row is stored.

Other audits' stores are opened read-only: reusing from a store never changes it.
"""

from __future__ import annotations

import json
import re
import shlex
import sqlite3
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelgate.audit.identity import (
    FINAL_VERDICTS,
    inputs_digest,
    problem_folder,
    reuse_key,
)
from kernelgate.audit.judge import (
    EVIDENCE_NAME,
    materialize,
    memory_failure,
    source_text_bytes,
    work_folder_name,
)
from kernelgate.audit.store import INFORMATIONAL_SETTINGS, SETTINGS_ADDED_LATER, STORE_NAME
from kernelgate.errors import KernelgateError
from kernelgate.evidence_io import sha256_file, write_atomic
from kernelgate.formats.corpus import CorpusRecord

# Settings that name the corpus rather than decide a row: another corpus's audit is exactly
# what is reused from (the records' own bytes are in the key instead). ``problems`` is where
# a KernelBench run's references were read from, a path of that machine: their bytes are
# in the key too.
REUSE_IGNORED_SETTINGS = INFORMATIONAL_SETTINGS | {"source_sha256", "problems"}
# The fields of a row that belong to its record, not to its judging (``base_row``'s and
# ``judge_record``'s): a reused row takes them from the record it stands for.
IDENTITY_FIELDS = ("id", "format", "source_ids", "source_verdict")


def settings_key(settings: dict[str, Any]) -> str:
    """The settings that decide rows, as one string (a store that lacks a setting added
    later reads as its default, as ``ResultStore.open`` reads it)."""
    deciding = {
        k: v
        for k, v in (SETTINGS_ADDED_LATER | settings).items()
        if k not in REUSE_IGNORED_SETTINGS
    }
    return json.dumps(deciding, sort_keys=True)


def final_row(row: dict[str, Any]) -> bool:
    """Whether ``row`` is a verdict that may stand for another record of the same pair."""
    return (
        row.get("verdict") in FINAL_VERDICTS
        and not row.get("interrupted")
        and not row.get("evidence_tampered")
        and not memory_failure(row)
    )


def row_key(row: dict[str, Any], deciding: str) -> str | None:
    """The identity of the judging that made ``row`` (None: not a final row, or one that
    does not record what it judged, with what, or where: never reused)."""
    if not final_row(row):
        return None
    return reuse_key(
        row.get("inputs_sha256"),
        row.get("format"),
        deciding,
        row.get("judged_with"),
        row.get("environment"),
    )


def record_inputs(record: CorpusRecord) -> dict[str, Any] | None:
    """``inputs_sha256`` of ``record`` as its judge would record it, without judging it
    (None: a file cannot be read now; the record is judged, and fails there as it would)."""
    try:
        reference, candidate = (
            Path(path).read_bytes() if path is not None else source_text_bytes(source)
            for path, source in (
                (record.reference_path, record.reference_source),
                (record.candidate_path, record.candidate_source),
            )
        )
        return inputs_digest(reference, candidate, problem_folder(record))
    except OSError:
        return None


def record_key(
    record: CorpusRecord, deciding: str, code: str, environment: dict[str, Any]
) -> str | None:
    """The identity of judging ``record`` now, in this audit."""
    return reuse_key(record_inputs(record), record.format, deciding, code, environment)


# -- the stores reused from ------------------------------------------------------------------


@dataclass
class ReuseSource:
    """An audit's store whose rows may be reused: another audit's, or this audit's own."""

    folder: Path  # resolved
    settings: dict[str, Any]
    rows: list[dict[str, Any]]
    own: bool = False

    @property
    def label(self) -> str:
        """How rows reused from here name it (``reused_from.audit``)."""
        return str(self.folder)

    @property
    def source_name(self) -> str | None:
        """The file name of the corpus that audit judged (its path was that machine's)."""
        source = self.settings.get("source")
        return Path(str(source)).name if source else None

    def evidence(self, row: dict[str, Any]) -> Path:
        """Where the evidence of ``row`` lies in this audit's folder (wherever it was
        judged: the row's own path may be another machine's)."""
        return self.folder / "records" / work_folder_name(row["id"]) / EVIDENCE_NAME


REUSE_ADVICE = "give the --out folder of an earlier kernelgate audit, or leave this --reuse out"


def open_source(folder: Path) -> ReuseSource:
    """The rows and settings of the audit in ``folder``, read from its store read-only.

    A usage error (exit 2, one line) where ``folder`` is missing, is no audit's folder, or
    holds a store that cannot be read.
    """
    if not folder.exists():
        raise KernelgateError(f"--reuse {folder}: no such folder; {REUSE_ADVICE}")
    if not folder.is_dir():
        raise KernelgateError(f"--reuse {folder}: not a folder; {REUSE_ADVICE}")
    path = folder / STORE_NAME
    if not path.is_file():
        raise KernelgateError(
            f"--reuse {folder}: not an audit folder (it holds no {STORE_NAME}); {REUSE_ADVICE}"
        )
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            settings = json.loads(meta["settings"])
            rows = [json.loads(r[0]) for r in db.execute("SELECT data FROM rows ORDER BY position")]
        finally:
            db.close()
    except (sqlite3.Error, KeyError, ValueError) as exc:
        what = f"no {exc} entry" if isinstance(exc, KeyError) else str(exc)
        raise KernelgateError(
            f"--reuse {folder}: cannot read its audit store {STORE_NAME} ({what}); a store "
            "copied while its audit ran, or without its -wal file, reads so: copy the whole "
            f"folder of the finished audit, or leave this --reuse out"
        ) from None
    if not isinstance(settings, dict) or not all(isinstance(r, dict) for r in rows):
        raise KernelgateError(
            f"--reuse {folder}: its {STORE_NAME} is not a kernelgate audit store; {REUSE_ADVICE}"
        )
    return ReuseSource(folder.resolve(), settings, rows)


# -- the plan --------------------------------------------------------------------------------


@dataclass
class ReusePlan:
    """Which records of this audit take a row already judged, and which wait for one."""

    # (record, where from, the row there), in corpus order
    reused: list[tuple[CorpusRecord, ReuseSource, dict[str, Any]]] = field(default_factory=list)
    # key -> records whose pair another record of this run judges first (``leaders``)
    followers: dict[str, list[CorpusRecord]] = field(default_factory=dict)
    leaders: dict[str, str] = field(default_factory=dict)  # record id -> key, judged here
    # per source label: records reused from it, and why it offers nothing where it does not
    counts: Counter[str] = field(default_factory=Counter)
    notes: dict[str, str] = field(default_factory=dict)
    sources: list[ReuseSource] = field(default_factory=list)

    def waiting(self) -> int:
        return sum(len(f) for f in self.followers.values())

    def pending(self) -> list[CorpusRecord]:
        """Every follower still without a row (its leader gave no final row): judged after
        all, each on its own."""
        left = [r for records in self.followers.values() for r in records]
        self.followers.clear()
        return left

    def line(self) -> str:
        """The one line an audit prints at its start: what it reuses, from where."""
        parts = []
        for source in self.sources:
            count = self.counts[source.label]
            if source.own and not count:
                continue
            where = "this audit's own store" if source.own else source.label
            name = f" ({source.source_name})" if source.source_name and not source.own else ""
            note = f": {self.notes[source.label]}" if source.label in self.notes else ""
            parts.append(f"{count} from {where}{name}{note}")
        if self.waiting():
            parts.append(f"{self.waiting()} repeating a pair judged earlier in this run")
        total = len(self.reused) + self.waiting()
        return f"reusing {total} record(s) judged before: " + ("; ".join(parts) or "none")


def why_nothing(source: ReuseSource, deciding: str, code: str, environment: dict[str, Any]) -> str:
    """Why none of ``source``'s rows can be reused here: the first part that differs."""
    final = [r for r in source.rows if final_row(r)]
    if not source.rows:
        return "its store has no rows"
    if not final:
        return "none of its rows is a final verdict"
    if settings_key(source.settings) != deciding:
        ours, theirs = json.loads(deciding), json.loads(settings_key(source.settings))
        differ = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
        return f"judged with other settings ({', '.join(differ)} differ)"
    if not any(r.get("judged_with") == code for r in final):
        digests = sorted({str(r.get("judged_with", "unrecorded")) for r in final})
        return f"judged by other kernelgate code ({', '.join(digests)}; this is {code})"
    if not any(r.get("environment") == environment for r in final):
        if not any(r.get("environment") for r in final):
            return "its rows do not record the environment that judged them"
        return "judged in another environment (torch, Triton, CUDA or GPU differ)"
    if not any(r.get("inputs_sha256") for r in final):
        return "its rows do not record the bytes they judged"
    return "no record of this corpus has a pair it judged"


def plan_reuse(
    todo: Iterable[CorpusRecord],
    sources: list[ReuseSource],
    *,
    deciding: str,
    code: str,
    environment: dict[str, Any],
    must_judge: set[str],
) -> ReusePlan:
    """Which of ``todo`` (readable records without a row) reuse a row of ``sources`` (the
    first that has one, in order), which wait for another record of this run with the
    same pair, and which are judged (``must_judge``: those an option asked to judge again).
    """
    plan = ReusePlan(sources=sources)
    index: dict[str, list[tuple[ReuseSource, dict[str, Any]]]] = {}
    for source in sources:
        source_deciding = settings_key(source.settings)
        for row in source.rows:
            key = row_key(row, source_deciding)
            if key is not None:
                index.setdefault(key, []).append((source, row))
    for record in todo:
        if record.unreadable is not None:
            continue
        key = record_key(record, deciding, code, environment)
        if key is None or record.id in must_judge:
            continue
        found = next(((s, r) for s, r in index.get(key, []) if evidence_intact(s, r)), None)
        if found is not None:
            plan.reused.append((record, *found))
            plan.counts[found[0].label] += 1
        elif key in plan.followers:
            plan.followers[key].append(record)
        else:
            plan.followers[key] = []
            plan.leaders[record.id] = key
    plan.followers = {k: v for k, v in plan.followers.items() if v}
    for source in sources:
        if not source.own and not plan.counts[source.label]:
            plan.notes[source.label] = why_nothing(source, deciding, code, environment)
    return plan


def evidence_intact(source: ReuseSource, row: dict[str, Any]) -> bool:
    """Whether the evidence ``row`` points to is there with the digest it was judged with
    (a row without evidence, a load failure say, needs none)."""
    if not row.get("evidence"):
        return True
    try:
        return sha256_file(source.evidence(row)) == row.get("evidence_sha256")
    except OSError:
        return False


# -- the reused row --------------------------------------------------------------------------


def reused_row(
    record: CorpusRecord, source: ReuseSource, old: dict[str, Any], out_dir: Path
) -> dict[str, Any] | None:
    """``old``'s judged parts as the row of ``record`` in the audit of ``out_dir``, its
    evidence copied into the record's folder there (None: that evidence no longer has the
    digest it was judged with; the record is judged instead).

    The record's own files are written into its folder as a judge would write them, so the
    replays name this audit's folder; every path into the old record's folder is moved to
    it, and the old record's corpus paths (a pairs corpus's own files) to the new one's.
    """
    work = out_dir.resolve() / "records" / work_folder_name(record.id)
    work.mkdir(parents=True, exist_ok=True)
    for stale in ("result.json", "request.json"):  # an earlier judging's, never this row's
        (work / stale).unlink(missing_ok=True)
    evidence = None
    if old.get("evidence"):
        try:
            data = source.evidence(old).read_bytes()
        except OSError:
            return None
        evidence = work / EVIDENCE_NAME
        if write_atomic(evidence, data) != old.get("evidence_sha256"):
            evidence.unlink(missing_ok=True)
            return None
    reference, candidate = materialize(record, work)
    moves = {
        str(old.get("reference")): str(reference),
        str(old.get("candidate")): str(candidate),
    }
    old_problem, new_problem = (old.get("source_ids") or {}).get("problem"), problem_folder(record)
    if old_problem and new_problem:
        moves[str(old_problem)] = new_problem
    row = _relocated(old, work_folder_name(old["id"]), work, moves)
    row |= {k: getattr(record, k) for k in IDENTITY_FIELDS}
    row |= {
        "reference": str(reference),
        "candidate": str(candidate),
        "evidence": str(evidence) if evidence is not None else None,
        "reused_from": {"audit": source.label, "source": source.source_name, "id": old["id"]},
    }
    row.pop("recovered_result", None)  # how the old row reached its store, not this one
    return row


def _relocated(value: Any, old_folder: str, work: Path, moves: dict[str, str]) -> Any:
    """``value`` (a row, recursively) with paths into the old record folder moved to
    ``work``, and each replay's arguments named in ``moves`` replaced."""
    folder = re.compile(r"[^\s'\"]*/records/" + re.escape(old_folder) + r"(?=/|$|[\s'\"])")
    target = str(work)

    def move(item: Any, key: str | None = None) -> Any:
        if isinstance(item, dict):
            return {k: move(v, k) for k, v in item.items()}
        if isinstance(item, list):
            return [move(v) for v in item]
        if not isinstance(item, str):
            return item
        if key == "replay":
            try:
                words = shlex.split(item)
            except ValueError:
                words = None
            if words is not None:
                item = shlex.join(moves.get(w, w) for w in words)
        return folder.sub(lambda _: target, item)

    return move(value)
