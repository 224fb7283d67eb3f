"""``kernelgate audit-combine``: one report over several audits (issue 19).

Issue 19 audits the five CUDA-L1 files (h100, a100, l40, h20, 3090; 1,250 records), each into
a folder of its own, and asks for one summary over all of them: the disagreement matrix over
every record, the headline rates, the gate failures. The combined figures are computed from
the rows of each audit's ``summary.json`` with ``report.py``'s own functions
(``disagreement_matrix``, ``headline``, ``reused_summary``), not added up from the audits'
aggregate figures, so that

- one rule makes the matrix whether it covers one corpus or five (the combined matrix is the
  sum of the per-audit ones by construction, and the tests check that it is);
- a summary written by an older kernelgate, whose own matrix had other cells, combines like
  a new one, as long as its rows carry what the figures need (checked, with a message that
  names the folder and what is missing).

Rows an audit reused from another (``reuse.py``: ``reused_from`` in the row) count as records
of the audit they are in: a record of the a100 file is a record of the a100 file, whoever
judged its pair first. The report says, per audit and in all, how many rows were judged
there and how many were reused.

The audits' folders are only read; the output folder may not be one of them (it would
overwrite that audit's summary.json).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelgate.audit.report import (
    CONTRACT_OUTCOMES,
    HEADLINE_HEADER,
    MATRIX_COLUMNS,
    OLD_CHECK_OUTCOMES,
    SUMMARY_SCHEMA,
    Table,
    _fmt,
    _rate,
    disagreement_figure,
    disagreement_matrix,
    disagreement_table,
    headline,
    headline_cells,
    partial_audit_text,
    png_bytes,
    reused_summary,
)
from kernelgate.errors import KernelgateError
from kernelgate.evidence_io import write_atomic
from kernelgate.serde import Serializable

COMBINED_SCHEMA = "kernelgate.audit-combined/1"
SUMMARY_NAME = "summary.json"
README_NAME = "README.md"
PLOT_NAME = "disagreement.png"
GATE_KINDS = ("tolerance-free", "thresholded")
# What every summary row must carry for the combined figures (``stage`` may be absent: a
# row without one did not load, as ``summarize`` counts it).
ROW_FIELDS = ("id", "verdict", "old_check", "failed_gates")
MATRIX_CELLS = [
    f"old_{old}_contract_{new}" for old in ("accepts", "rejects") for new in MATRIX_COLUMNS
]


class CombineError(KernelgateError):
    """An audit folder cannot be combined (no summary, a malformed one, the same corpus
    twice) or the output folder would overwrite an audit: the CLI prints it, exit 2."""


@dataclass
class AuditPart(Serializable):
    """One audit's figures in the combined document, computed from its summary's rows."""

    name: str  # the folder's name (or, where two folders share one, format-corpus stem)
    folder: str  # as given on the command line
    source: str | None  # the corpus's file name (its path is the auditing machine's own)
    source_sha256: str | None
    format: str | None
    device: str | None  # the store's --device
    only: list[str] | None  # the gates a partial audit ran (None: a full audit)
    records: int
    corpus_records: int | None
    without_row: int  # records of the corpus without a row yet (an unfinished audit)
    unreadable: int
    loaded: int  # records whose gates ran (``stage == "gates"``)
    old_check: dict[str, int]
    old_check_current_tolerance: dict[str, int] | None  # None: a row lacks it
    contract: dict[str, int]
    judged: int  # rows judged in this audit (not unreadable, not reused)
    reused: int  # rows copied from an earlier judging of the same pair
    reused_from: list[dict[str, Any]]  # reused_summary's ``from``
    disagreement: dict[str, int]
    disagreement_current_tolerance: dict[str, int] | None
    headline: dict[str, Any]
    gate_failures: dict[str, int]  # records that failed each gate
    judged_in_timed_runs: int | None
    wall_hours: float | None
    judged_per_hour: float | None
    judged_with: dict[str, int]  # rows per kernelgate source digest
    environments: list[dict[str, Any]] | None  # None: a summary from before they were kept
    distinct_pairs: int | None  # None: no row records what it judged (inputs_sha256)


@dataclass
class CombinedAudit(Serializable):
    """``kernelgate audit-combine``'s ``summary.json``: every audit, then all of them."""

    audits: list[AuditPart]
    records: int
    unreadable: int
    loaded: int
    judged: int
    reused: int
    old_check: dict[str, int]
    old_check_current_tolerance: dict[str, int] | None
    contract: dict[str, int]
    disagreement: dict[str, int]
    disagreement_current_tolerance: dict[str, int] | None  # None: some row lacks it
    headline: dict[str, Any]
    gates: dict[str, dict[str, Any]]  # per gate: kind, pass, fail, skipped, failure_rate
    throughput: dict[str, Any]
    # distinct (reference, candidate) pairs over the rows that record their inputs' digests;
    # None where no row does (summaries from before inputs_sha256 was kept)
    distinct_pairs: dict[str, Any] | None
    partial: list[str] = field(default_factory=list)  # audits that ran only some gates
    unfinished: list[str] = field(default_factory=list)  # audits with records left
    plots: list[str] = field(default_factory=list)
    schema: str = COMBINED_SCHEMA


# -- reading ---------------------------------------------------------------------------------


def load_summary(folder: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """An audit folder's summary.json, checked for what the combined figures read, and each
    of its gates' kind (``_gate_kinds``, which the check computes anyway).

    Each check raises ``CombineError`` naming the folder and what is wrong, so that a
    wrong folder on the command line reads as such and never as a traceback.
    """
    where = folder / SUMMARY_NAME
    if not folder.is_dir():
        raise CombineError(f"{folder}: not a folder (give an audit's --out folder)")
    if not where.is_file():
        raise CombineError(
            f"{folder}: no {SUMMARY_NAME} (an audit's --out folder holds one; "
            f"`kernelgate audit-report {folder}` rewrites it from the audit's store)"
        )
    try:
        summary = json.loads(where.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CombineError(f"{where}: cannot be read as JSON ({exc})") from None
    if not isinstance(summary, dict):
        raise CombineError(f"{where}: not a JSON object")
    if summary.get("schema") != SUMMARY_SCHEMA:
        raise CombineError(
            f"{where}: schema {summary.get('schema')!r}, not {SUMMARY_SCHEMA!r} "
            "(not an audit's summary; a combined one cannot be combined again)"
        )
    rows = summary.get("rows")
    if not isinstance(rows, list):
        raise CombineError(f"{where}: no 'rows' list")
    for index, row in enumerate(rows):
        _check_row(where, index, row)
    if summary.get("records") != len(rows):
        raise CombineError(
            f"{where}: 'records' is {summary.get('records')!r} but it holds {len(rows)} rows"
        )
    if not isinstance(summary.get("settings", {}), dict):
        raise CombineError(f"{where}: 'settings' is not an object")
    return summary, _gate_kinds(where, summary)


def _check_row(where: Path, index: int, row: Any) -> None:
    if not isinstance(row, dict):
        raise CombineError(f"{where}: row {index} is not an object")
    what = f"{where}: row {index} ({row.get('id', 'no id')})"
    missing = [name for name in ROW_FIELDS if name not in row]
    if missing:
        raise CombineError(f"{what} has no {', '.join(repr(m) for m in missing)}")
    if row["verdict"] not in CONTRACT_OUTCOMES:
        raise CombineError(
            f"{what}: verdict {row['verdict']!r} is none of {', '.join(CONTRACT_OUTCOMES)}"
        )
    for name in ("old_check", "old_check_current"):
        if name in row and row[name] not in OLD_CHECK_OUTCOMES:
            raise CombineError(
                f"{what}: {name} {row[name]!r} is none of {', '.join(OLD_CHECK_OUTCOMES)}"
            )
    if not isinstance(row["failed_gates"], list):
        raise CombineError(f"{what}: failed_gates is not a list")


def _gate_kinds(where: Path, summary: dict[str, Any]) -> dict[str, str]:
    """Each gate's kind, from the summary's gate table: summary rows name their failed gates
    only, and ``headline`` needs the kind of each (the table lists every gate that ran)."""
    gates = summary.get("gates")
    if not isinstance(gates, dict):
        raise CombineError(f"{where}: no 'gates' table")
    kinds = {}
    for gate, stats in gates.items():
        counts = (
            [stats.get(k) for k in ("pass", "fail", "skipped")] if isinstance(stats, dict) else []
        )
        if not counts or not all(isinstance(c, int) for c in counts):
            raise CombineError(f"{where}: gate {gate}'s pass, fail and skipped are not counts")
        if stats.get("kind") not in GATE_KINDS:
            raise CombineError(f"{where}: gate {gate}'s kind {stats.get('kind')!r} is unknown")
        kinds[gate] = stats["kind"]
    for row in summary["rows"]:
        unknown = [g for g in row["failed_gates"] if g not in kinds] if _loaded(row) else []
        if unknown:
            raise CombineError(
                f"{where}: row {row['id']} failed {', '.join(unknown)}, which the 'gates' "
                "table does not list"
            )
    return kinds


def _loaded(row: dict[str, Any]) -> bool:
    """Whether the record's gates ran: the records ``headline`` is over (as in summarize)."""
    return row.get("stage") == "gates"


# -- figures ---------------------------------------------------------------------------------


def _headline_rows(rows: list[dict[str, Any]], kinds: dict[str, str]) -> list[dict[str, Any]]:
    """The loaded rows in the shape ``report.headline`` reads (a store row's ``gates``),
    rebuilt from a summary row's failed gates and the gate table's kinds: only failures
    count there, so the passing gates a summary row does not list are not needed."""
    return [
        {
            "verdict": row["verdict"],
            "gates": [{"id": g, "status": "fail", "kind": kinds[g]} for g in row["failed_gates"]],
        }
        for row in rows
        if _loaded(row)
    ]


def _counts(rows: list[dict[str, Any]], key: str, outcomes: tuple[str, ...]) -> dict[str, int]:
    """How many rows have each of ``outcomes`` in ``key`` (every outcome, zeros too)."""
    counts = Counter(row[key] for row in rows)
    return {outcome: counts[outcome] for outcome in outcomes}


def _current(rows: list[dict[str, Any]]) -> bool:
    """Whether every row carries the old check at today's tolerance (a matrix over some
    rows only would be taken for one over all of them)."""
    return bool(rows) and all("old_check_current" in row for row in rows)


def _pair(row: dict[str, Any]) -> tuple[Any, ...] | None:
    """What identifies the row's (reference, candidate) pair: the digests of the bytes judged
    (and of a problem folder's files), or None where the row records none."""
    inputs = row.get("inputs_sha256")
    if not isinstance(inputs, dict) or not inputs.get("reference") or not inputs.get("candidate"):
        return None
    return (inputs["reference"], inputs["candidate"], inputs.get("problem"))


def _part(name: str, folder: Path, summary: dict[str, Any], kinds: dict[str, str]) -> AuditPart:
    rows = summary["rows"]
    settings = summary.get("settings") or {}
    current = _current(rows)
    reused = reused_summary(rows)
    throughput = summary.get("throughput") or {}
    pairs = {p for p in map(_pair, rows) if p is not None}
    source = settings.get("source")
    only = summary.get("only", settings.get("only"))
    return AuditPart(
        name=name,
        folder=str(folder),
        source=Path(str(source)).name if source else None,
        source_sha256=settings.get("source_sha256"),
        format=settings.get("format"),
        device=settings.get("device"),
        only=list(only) if only else None,
        records=len(rows),
        corpus_records=summary.get("corpus_records"),
        without_row=len(summary.get("without_row") or []),
        unreadable=sum(1 for r in rows if r["verdict"] == "unreadable"),
        loaded=sum(1 for r in rows if _loaded(r)),
        old_check=_counts(rows, "old_check", OLD_CHECK_OUTCOMES),
        old_check_current_tolerance=(
            _counts(rows, "old_check_current", OLD_CHECK_OUTCOMES) if current else None
        ),
        contract=_counts(rows, "verdict", CONTRACT_OUTCOMES),
        judged=reused["judged"],
        reused=reused["rows"],
        reused_from=reused["from"],
        disagreement=disagreement_matrix(rows, "old_check"),
        disagreement_current_tolerance=(
            disagreement_matrix(rows, "old_check_current") if current else None
        ),
        headline=headline(_headline_rows(rows, kinds)),
        gate_failures={g: int(s["fail"]) for g, s in sorted(summary["gates"].items())},
        judged_in_timed_runs=throughput.get("judged_in_timed_runs"),
        wall_hours=throughput.get("wall_hours"),
        judged_per_hour=throughput.get("judged_per_hour"),
        judged_with=dict(summary.get("judged_with") or {}),
        environments=summary.get("environments"),
        distinct_pairs=len(pairs) if pairs else None,
    )


def _names(folders: list[Path], summaries: list[dict[str, Any]]) -> list[str]:
    """Each audit's name: its folder's (``cuda-l1-h100``), or where two folders share a name
    (``out/`` of two machines), the format and the corpus's stem (``cuda-l1-a100``)."""
    taken: dict[str, Path] = {}
    names = []
    for folder, summary in zip(folders, summaries, strict=True):
        name = folder.resolve().name
        if name in taken:
            settings = summary.get("settings") or {}
            stem = Path(str(settings.get("source") or "")).stem
            name = f"{settings.get('format') or 'audit'}-{stem or len(names)}"
        if name in taken:
            raise CombineError(
                f"{folder} and {taken[name]} both read as audit {name!r}: give folders named "
                "after their corpus (docs/audits/cuda-l1-<file>)"
            )
        taken[name] = folder
        names.append(name)
    return names


def _same_audit_twice(folders: list[Path], summaries: list[dict[str, Any]]) -> None:
    """Refuse a folder given twice, or two audits of one corpus (the same ``source_sha256``):
    their records would count twice in every combined figure."""
    resolved: set[Path] = set()
    corpora: dict[str, Path] = {}
    for folder, summary in zip(folders, summaries, strict=True):
        if folder.resolve() in resolved:
            raise CombineError(f"{folder} is given twice: its records would be counted twice")
        resolved.add(folder.resolve())
        digest = (summary.get("settings") or {}).get("source_sha256")
        if digest and digest in corpora:
            raise CombineError(
                f"{folder} audits the same corpus (sha256 {str(digest)[:12]}…) as "
                f"{corpora[digest]}: its records would be counted twice"
            )
        if digest:
            corpora[str(digest)] = folder


def combine(folders: list[Path]) -> CombinedAudit:
    """The combined document over the audits in ``folders`` (read, checked, never written)."""
    if not folders:
        raise CombineError("no audit folder given")
    loaded = [load_summary(folder) for folder in folders]
    summaries = [summary for summary, _ in loaded]
    _same_audit_twice(folders, summaries)
    names = _names(folders, summaries)
    parts = [
        _part(name, folder, summary, audit_kinds)
        for name, folder, (summary, audit_kinds) in zip(names, folders, loaded, strict=True)
    ]
    rows = [row for summary in summaries for row in summary["rows"]]
    kinds: dict[str, str] = {}
    for folder, (_, audit_kinds) in zip(folders, loaded, strict=True):
        for gate, kind in audit_kinds.items():
            if kinds.setdefault(gate, kind) != kind:
                raise CombineError(f"{folder}: gate {gate} is {kind} there, {kinds[gate]} before")
    current = _current(rows)
    reused = reused_summary(rows)
    return CombinedAudit(
        audits=parts,
        records=len(rows),
        unreadable=sum(p.unreadable for p in parts),
        loaded=sum(p.loaded for p in parts),
        judged=reused["judged"],
        reused=reused["rows"],
        old_check=_counts(rows, "old_check", OLD_CHECK_OUTCOMES),
        old_check_current_tolerance=(
            _counts(rows, "old_check_current", OLD_CHECK_OUTCOMES) if current else None
        ),
        contract=_counts(rows, "verdict", CONTRACT_OUTCOMES),
        disagreement=disagreement_matrix(rows, "old_check"),
        disagreement_current_tolerance=(
            disagreement_matrix(rows, "old_check_current") if current else None
        ),
        headline=headline(_headline_rows(rows, kinds)),
        gates=_gates(summaries),
        throughput=_throughput(parts),
        distinct_pairs=_distinct_pairs(names, summaries),
        partial=[p.name for p in parts if p.only],
        unfinished=[p.name for p in parts if p.without_row],
    )


def _gates(summaries: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each gate's pass, fail and skipped counts summed over the audits (records that
    loaded), with the failure rate over the records it judged, as ``summarize`` gives it."""
    gates: dict[str, dict[str, Any]] = {}
    for summary in summaries:
        for gate, stats in summary["gates"].items():
            total = gates.setdefault(
                gate, {"kind": stats["kind"], "pass": 0, "fail": 0, "skipped": 0}
            )
            for key in ("pass", "fail", "skipped"):
                total[key] += int(stats[key])
    for total in gates.values():
        total["failure_rate"] = _rate(total["fail"], total["pass"] + total["fail"])
    return dict(sorted(gates.items()))


def _throughput(parts: list[AuditPart]) -> dict[str, Any]:
    """Judged records per hour of audit wall time, over the audits whose runs were timed.
    Wall hours are summed: audits that ran side by side each count their own hours."""
    timed = [p for p in parts if p.wall_hours and p.judged_in_timed_runs is not None]
    judged = sum(p.judged_in_timed_runs or 0 for p in timed)
    hours = sum(p.wall_hours or 0.0 for p in timed)
    return {
        "audits_timed": len(timed),
        "judged_in_timed_runs": judged,
        "wall_hours": round(hours, 4),
        "judged_per_hour": round(judged / hours, 1) if hours else None,
    }


def _distinct_pairs(names: list[str], summaries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Distinct (reference, candidate) pairs over the rows that record the digests of what
    they judged, and how many pairs occur in more than one audit; None where no row does
    (then nothing says which records share a pair, and nothing is guessed)."""
    audits_of: dict[tuple[Any, ...], set[str]] = {}
    with_digest = without = 0
    for name, summary in zip(names, summaries, strict=True):
        for row in summary["rows"]:
            pair = _pair(row)
            if pair is None:
                without += row["verdict"] != "unreadable"
            else:
                with_digest += 1
                audits_of.setdefault(pair, set()).add(name)
    if not audits_of:
        return None
    return {
        "distinct": len(audits_of),
        "rows_with_digest": with_digest,
        # rows that were read and judged (or reused) but record no digest: an older store
        "rows_without_digest": without,
        "in_more_than_one_audit": sum(1 for audits in audits_of.values() if len(audits) > 1),
    }


# -- documents -------------------------------------------------------------------------------


def _table(title: str, header: list[str], rows: list[list[str]]) -> list[str]:
    """One Markdown table, cells escaped as report.py's are (a ``|`` in a reason)."""
    lines = [f"## {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return [*lines, ""]


def _audit_rows(combined: CombinedAudit) -> list[list[str]]:
    """The per-audit table: one row per audit, then the totals (``**all**``)."""

    def cells(p: AuditPart | CombinedAudit, name: str, corpus: str, device: str) -> list[str]:
        per_hour = (
            p.judged_per_hour if isinstance(p, AuditPart) else p.throughput["judged_per_hour"]
        )
        return [
            name,
            corpus,
            device,
            str(p.records),
            str(p.unreadable),
            str(p.loaded),
            *[str(p.old_check[k]) for k in OLD_CHECK_OUTCOMES],
            *[str(p.contract[k]) for k in ("verified", "narrowed", "rejected", "error")],
            str(p.judged),
            str(p.reused),
            _fmt(per_hour),
        ]

    rows = [
        cells(
            p,
            p.name + (" (partial)" if p.only else ""),
            (p.source or "-") + (f" ({p.records} of {p.corpus_records})" if p.without_row else ""),
            p.device or "-",
        )
        for p in combined.audits
    ]
    return [*rows, cells(combined, "**all**", "", "")]


AUDIT_HEADER = [
    "audit",
    "corpus",
    "device",
    "records",
    "unreadable",
    "loaded",
    *[f"old check {k}" for k in OLD_CHECK_OUTCOMES],
    *[f"contract {k}" for k in ("verified", "narrowed", "rejected", "error")],
    "judged here",
    "reused",
    "judged per hour",
]


def sections(combined: CombinedAudit) -> list[Table]:
    """(title, header, rows) of every table of the combined page."""
    audits = combined.audits
    title, header, matrix_rows = disagreement_table(
        combined.disagreement, combined.disagreement_current_tolerance
    )
    tables: list[Table] = [
        ("Audits", AUDIT_HEADER, _audit_rows(combined)),
        (f"{title}: {_audits(combined)}, {combined.records} records", header, matrix_rows),
        (
            "Disagreement matrix per audit (old check at 1e-2; the last row is the sum)",
            ["audit", *[c.replace("_", " ") for c in MATRIX_CELLS], "excluded"],
            [
                [name, *[str(m[c]) for c in [*MATRIX_CELLS, "excluded"]]]
                for name, m in [
                    *[(p.name, p.disagreement) for p in audits],
                    ("**all**", combined.disagreement),
                ]
            ],
        ),
        (
            "Headline rates (records that loaded; narrowed records count where their gate failed)",
            ["audit", *HEADLINE_HEADER],
            [
                [name, *headline_cells(head)]
                for name, head in [
                    *[(p.name, p.headline) for p in audits],
                    ("**all**", combined.headline),
                ]
            ],
        ),
        (
            "Gate failures (records that loaded, summed over the audits)",
            [
                "gate",
                "kind",
                "pass",
                "fail",
                "skipped",
                "failure rate",
                *[f"fail: {p.name}" for p in audits],
            ],
            [
                [
                    gate,
                    s["kind"],
                    str(s["pass"]),
                    str(s["fail"]),
                    str(s["skipped"]),
                    "-" if s["failure_rate"] is None else f"{100 * s['failure_rate']:.1f}%",
                    *[str(p.gate_failures.get(gate, "-")) for p in audits],
                ]
                for gate, s in combined.gates.items()
            ],
        ),
        (
            "Judged with",
            ["audit", "device", "environment (rows)", "kernelgate source digest (rows)"],
            [
                [
                    p.name,
                    p.device or "-",
                    "; ".join(
                        f"{_environment_text(e['environment'])} ({e['rows']})"
                        for e in p.environments
                    )
                    if p.environments
                    else "not recorded",
                    ", ".join(f"{k}: {v}" for k, v in p.judged_with.items()) or "-",
                ]
                for p in audits
            ],
        ),
    ]
    return tables


def _audits(combined: CombinedAudit) -> str:
    """``N audit(s)`` for the page's text."""
    count = len(combined.audits)
    return f"{count} audit" + ("s" if count != 1 else "")


def _environment_text(env: dict[str, Any]) -> str:
    """An environment in a few words: GPU, torch, Triton, CUDA (what decides verdicts)."""
    parts = [f"{k} {env[k]}" for k in ("gpu", "torch", "triton", "cuda") if env.get(k)]
    return ", ".join(parts) or str(env.get("device", "?"))


def _opening(combined: CombinedAudit) -> list[str]:
    """The page's first lines: what it covers, reused vs judged, and what it cannot vouch
    for (partial and unfinished audits)."""
    lines = [
        f"{_audits(combined)} ({', '.join(p.name for p in combined.audits)}), "
        f"{combined.records} records: {combined.judged} judged in their own audit, "
        f"{combined.reused} reused from an earlier judging of the same pair (`--reuse`; "
        f"counted as records of the audit they are in), {combined.unreadable} unreadable. "
        "Every figure below is over all the audits' rows, computed as `kernelgate audit` "
        "computes one audit's (`report.py`); each audit's own report is in its folder.",
        "",
    ]
    pairs = combined.distinct_pairs
    if pairs:
        lines += [
            f"Distinct (reference, candidate) pairs: {pairs['distinct']} over the "
            f"{pairs['rows_with_digest']} rows that record the digests of what they judged "
            f"({pairs['in_more_than_one_audit']} occur in more than one audit"
            + (
                f"; {pairs['rows_without_digest']} judged rows record none"
                if pairs["rows_without_digest"]
                else ""
            )
            + ").",
            "",
        ]
    for part in combined.audits:
        if part.only:
            lines += [f"> **{part.name}: {partial_audit_text(part.only)}**", ""]
        if part.without_row:
            lines += [
                f"> **{part.name}: NOT FINISHED: {part.without_row} of its "
                f"{part.corpus_records} records have no row yet; the figures cover the "
                f"{part.records} that do.**",
                "",
            ]
    return lines


def markdown(combined: CombinedAudit) -> str:
    """The combined page (README.md of the output folder)."""
    lines = ["# kernelgate audits, combined", "", *_opening(combined)]
    for title, header, rows in sections(combined):
        lines += _table(title, header, rows)
    if combined.plots:
        lines += ["## Plots", ""]
        lines += [f"![Disagreement matrix, all audits]({name})" for name in combined.plots]
        lines.append("")
    lines += [
        "Written by `kernelgate audit-combine "
        + " ".join(p.name for p in combined.audits)
        + " --out DIR` from each audit's summary.json (docs/audit.md).",
    ]
    return "\n".join(lines) + "\n"


def _plot(combined: CombinedAudit) -> bytes | None:
    """The combined disagreement matrix as a PNG (None: matplotlib is not installed)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    title = f"{_audits(combined)}, {combined.records} records"
    return png_bytes(plt, disagreement_figure(plt, combined.disagreement, title))


def write_combined(folders: list[Path], out: Path) -> CombinedAudit:
    """Combine the audits in ``folders`` into ``out``: summary.json, README.md and the
    disagreement plot. Refused before anything is written when ``out`` is one of the audits'
    folders or holds an audit's summary (it would be overwritten)."""
    inputs = {folder.resolve() for folder in folders}
    if out.resolve() in inputs:
        raise CombineError(f"--out {out} is one of the audits: its summary.json would be lost")
    existing = out / SUMMARY_NAME
    if existing.is_file():
        try:
            schema = json.loads(existing.read_text()).get("schema")
        except (OSError, UnicodeDecodeError, ValueError, AttributeError):
            schema = None
        if schema != COMBINED_SCHEMA:
            raise CombineError(
                f"--out {out} holds a {SUMMARY_NAME} that is not a combined one "
                f"(schema {schema!r}): give another folder"
            )
    combined = combine(folders)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CombineError(f"cannot create --out {out}: {exc}") from None
    png = _plot(combined)
    if png is not None:
        write_atomic(out / PLOT_NAME, png)
        combined.plots = [PLOT_NAME]
    write_atomic(out / SUMMARY_NAME, combined.to_json())
    write_atomic(out / README_NAME, markdown(combined))
    return combined
