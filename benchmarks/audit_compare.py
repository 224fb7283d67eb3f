"""Two audits' verdicts, record by record: what changed, and what a human must explain.

Issue 19's acceptance asks that a new audit of a corpus give "verdicts unchanged against the
committed audit, except rows you explain one by one". That comparison was made by hand once
(docs/audits/cuda-l1-h100/run-2026-12-04/README.md, "Verdicts against the committed
audit"); this script makes it, so a device session produces it in one command::

    PYTHONPATH=src python benchmarks/audit_compare.py docs/audits/cuda-l1-h100/summary.json \\
        --overlay docs/audits/cuda-l1-h100/rejudge-issue17/summary.json \\
        --overlay docs/audits/cuda-l1-h100/rejudge-issue17/part2/summary.json \\
        AUDIT_DIR --set-aside AUTH-01 --markdown compare.md --json compare.json

BEFORE, each ``--overlay`` and AFTER are each a ``summary.json`` (``kernelgate
audit-report``'s), an audit folder (its ``audit.sqlite``, read from a copy so nothing is
written to it; a folder without a store is read through its ``summary.json``), or
``benchmarks/audit_throughput.py``'s JSON (its ``rows``). Overlays replace BEFORE's rows by
id, in the order given: the committed audit was re-judged in parts, and each record is
compared with its latest judgement.

A record is the same when its verdict, its stage and its failed gates and rules (less the
``--set-aside`` ones) are. Setting a gate aside also sets aside the verdict it decided: a
row rejected only by AUTH-01 reads as verified. Where the remaining failures are all domain
gates (``kernelgate.domain.DOMAIN_GATES``, with RES-01), whether the judge would have
narrowed or rejected depends on gate evidence a summary row does not keep; such a row reads
"narrowed or rejected" and matches either.

Markdown goes to stdout (or ``--markdown FILE``): one table row per differing record, the
"why" column prefilled with the changed gates' reasons for a human to rewrite. ``--json``
writes everything (schema ``kernelgate.audit-compare/1``); a short summary goes to stderr.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from kernelgate.audit.report import _local_paths
from kernelgate.audit.store import STORE_NAME, ResultStore
from kernelgate.domain import DOMAIN_GATES

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
console = Console(stderr=True)

SCHEMA = "kernelgate.audit-compare/1"
SUMMARY_SCHEMA_PREFIX = "kernelgate.audit-summary/"
THROUGHPUT_SCHEMA_PREFIX = "kernelgate.audit-throughput/"
REASON_CHARS = 160  # a changed gate's reason, as shown: enough for a human to write "why"
# How far a verdict is towards acceptance: a move up is what a reviewer checks first.
RANK = {"verified": 2, "narrowed": 1, "rejected": 0, "error": 0, "unreadable": 0}
# The kinds of difference, in the order they are reported.
KINDS = ("verdict changed", "gates added", "gates removed", "gates added and removed")
UNDETERMINED = "narrowed or rejected"


class InputError(Exception):
    """An input that cannot be read as an audit's rows: said in one line, no traceback."""


@dataclass
class Judgement:
    """One record's verdict as one audit (or overlay) gave it."""

    id: str
    verdict: str
    stage: str | None
    failed_gates: list[str]
    failed_rules: list[str] = field(default_factory=list)
    gate_reasons: dict[str, str | None] = field(default_factory=dict)
    reason: str | None = None
    seconds: float | None = None
    source: str = ""  # which input gave this judgement (BEFORE or an overlay)

    @classmethod
    def from_row(cls, row: dict[str, Any], source: str) -> Judgement:
        """From a summary row (``gate_reasons``) or a store row (``gates``, each with its
        status and reason): both kinds of input carry the same facts under other keys."""
        try:
            reasons = row.get("gate_reasons")
            if reasons is None:
                reasons = {
                    g["id"]: _local_paths(g.get("reason"))
                    for g in row.get("gates") or []
                    if g.get("status") == "fail"
                }
            return cls(
                id=str(row["id"]),
                verdict=str(row["verdict"]),
                stage=row.get("stage"),
                failed_gates=list(row.get("failed_gates") or []),
                failed_rules=list(row.get("failed_rules") or []),
                gate_reasons=dict(reasons),
                reason=_local_paths(row.get("reason")),
                seconds=row.get("seconds"),
                source=source,
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise InputError(f"{source}: a row without {exc} ({str(row)[:120]})") from None

    def failed(self, set_aside: frozenset[str]) -> set[str]:
        """Failed gates and rules, less the set-aside ones: what the comparison looks at."""
        return (set(self.failed_gates) | set(self.failed_rules)) - set_aside

    def verdicts(self, set_aside: frozenset[str]) -> frozenset[str]:
        """The verdicts this row stands for once the set-aside failures are ignored (see the
        module's docstring; ``verdict.combine`` and ``domain.narrowable`` decide them)."""
        hidden = (set(self.failed_gates) | set(self.failed_rules)) & set_aside
        if not hidden or self.stage != "gates" or self.verdict not in ("rejected", "narrowed"):
            return frozenset({self.verdict})
        rules = set(self.failed_rules) - set_aside
        gates = set(self.failed_gates) - set_aside
        if rules:
            return frozenset({"rejected"})  # a failed rule rejects whatever the gates say
        if not gates:
            return frozenset({"verified"})
        domain_only = all(g in DOMAIN_GATES or g == "RES-01" for g in gates)
        if not (domain_only and gates & set(DOMAIN_GATES)):
            return frozenset({"rejected"})
        if self.verdict == "narrowed":
            return frozenset({"narrowed"})  # fewer domain failures narrow still
        return frozenset({"narrowed", "rejected"})


def _verdict_name(verdicts: frozenset[str]) -> str:
    return next(iter(verdicts)) if len(verdicts) == 1 else UNDETERMINED


def describe(row: Judgement, set_aside: frozenset[str]) -> str:
    """A verdict as the README's tables write it: ``rejected (CMP-01, ORD-02)``,
    ``rejected at load``, ``verified (AUTH-01 set aside)``."""
    verdict = _verdict_name(row.verdicts(set_aside))
    if row.stage not in ("gates", None):
        return f"{verdict} at {row.stage}"
    failed = sorted(row.failed(set_aside))
    hidden = sorted((set(row.failed_gates) | set(row.failed_rules)) & set_aside)
    parts = [", ".join(failed)] if failed and verdict != "verified" else []
    if hidden and verdict != row.verdict:
        parts.append(f"{', '.join(hidden)} set aside")
    return f"{verdict} ({'; '.join(parts)})" if parts else verdict


def _trim(text: str | None, limit: int = REASON_CHARS) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- reading ---------------------------------------------------------------------------------


def _store_rows(path: Path) -> list[dict[str, Any]]:
    """A store's rows, read from a copy: ``ResultStore`` creates its tables and sets WAL on
    open, and a store carried back from a device must stay as it came."""
    with tempfile.TemporaryDirectory(prefix="kernelgate-compare-") as scratch:
        copy = Path(scratch) / STORE_NAME
        for suffix in ("", "-wal", "-shm"):  # a store copied mid-run keeps rows in its WAL
            side = path.with_name(path.name + suffix)
            if side.exists():
                shutil.copyfile(side, copy.with_name(copy.name + suffix))
        try:
            store = ResultStore(copy)
            try:
                return store.rows()
            finally:
                store.close()
        except sqlite3.DatabaseError as exc:
            raise InputError(f"{path}: not an audit store ({exc})") from None


def _json_rows(path: Path) -> tuple[str, list[dict[str, Any]]]:
    try:
        document = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot be read as JSON ({exc})") from None
    schema = str(document.get("schema", "")) if isinstance(document, dict) else ""
    if schema.startswith(SUMMARY_SCHEMA_PREFIX):
        kind = "summary"
    elif schema.startswith(THROUGHPUT_SCHEMA_PREFIX):
        kind = "throughput"
        if not isinstance(document.get("rows"), list):
            raise InputError(
                f"{path}: a throughput JSON without its rows (written before "
                "audit_throughput.py kept them: its `rows` is a count)"
            )
    else:
        raise InputError(
            f"{path}: neither an audit summary nor a throughput JSON (schema {schema!r})"
        )
    rows = document.get("rows")
    if not isinstance(rows, list):
        raise InputError(f"{path}: no rows")
    return kind, rows


def load(path: Path, label: str) -> tuple[str, dict[str, Judgement]]:
    """(what kind of input, rows by id) of one input; ``label`` names it in the rows."""
    if path.is_dir():
        if (path / STORE_NAME).exists():
            kind, rows = "store", _store_rows(path / STORE_NAME)
        elif (path / "summary.json").exists():
            kind, rows = _json_rows(path / "summary.json")
        else:
            raise InputError(f"{path}: a folder with neither {STORE_NAME} nor summary.json")
    elif path.suffix == ".sqlite" and path.exists():
        kind, rows = "store", _store_rows(path)
    elif path.exists():
        kind, rows = _json_rows(path)
    else:
        raise InputError(f"{path}: does not exist")
    judged = [Judgement.from_row(row, label) for row in rows if isinstance(row, dict)]
    return kind, {j.id: j for j in judged}


# -- comparing -------------------------------------------------------------------------------


def _difference(
    before: Judgement, after: Judgement, set_aside: frozenset[str]
) -> dict[str, Any] | None:
    """How one record's judgement changed, or None when it did not."""
    was, now = before.verdicts(set_aside), after.verdicts(set_aside)
    gates_before, gates_after = before.failed(set_aside), after.failed(set_aside)
    verdict_same = bool(was & now) and before.stage == after.stage
    if verdict_same and gates_before == gates_after:
        return None
    added, removed = sorted(gates_after - gates_before), sorted(gates_before - gates_after)
    if not verdict_same:
        kind = "verdict changed"
    else:
        kind = KINDS[1 + bool(removed) + (bool(added) and bool(removed))]
    reasons: dict[str, dict[str, str]] = {}
    for gate in added:
        reasons[gate] = {"after": _trim(after.gate_reasons.get(gate))}
    for gate in removed:
        reasons[gate] = {"before": _trim(before.gate_reasons.get(gate))}

    def stage_name(row: Judgement, verdicts: frozenset[str]) -> str:
        name = _verdict_name(verdicts)
        return name if row.stage in ("gates", None) else f"{name} at {row.stage}"

    # "may have moved": an undetermined verdict counts at its most accepting reading
    moved = max(RANK.get(v, 0) for v in now) > max(RANK.get(v, 0) for v in was)
    return {
        "id": before.id,
        "kind": kind,
        "verdict_change": f"{stage_name(before, was)} -> {stage_name(after, now)}",
        "moved_towards_acceptance": moved,
        "before": _side(before, set_aside),
        "after": _side(after, set_aside),
        "gates_added": added,
        "gates_removed": removed,
        "gate_reasons": reasons,
    }


def _side(row: Judgement, set_aside: frozenset[str]) -> dict[str, Any]:
    return {
        "from": row.source,
        "verdict": row.verdict,
        "read_as": _verdict_name(row.verdicts(set_aside)),
        "stage": row.stage,
        "failed_gates": row.failed_gates,
        "failed_rules": row.failed_rules,
        "described": describe(row, set_aside),
        "reason": _trim(row.reason) or None,
    }


def compare(
    before: dict[str, Judgement], after: dict[str, Judgement], set_aside: frozenset[str]
) -> dict[str, Any]:
    """Counts, differences by kind and the moves towards acceptance, JSON-ready."""
    both = sorted(before.keys() & after.keys())
    found = [_difference(before[i], after[i], set_aside) for i in both]
    differences = [d for d in found if d is not None]
    by_kind = {k: [d["id"] for d in differences if d["kind"] == k] for k in KINDS}
    changes: dict[str, int] = {}
    for d in differences:
        if d["kind"] == "verdict changed":
            changes[d["verdict_change"]] = changes.get(d["verdict_change"], 0) + 1
    return {
        "counts": {
            "both": len(both),
            "same": len(both) - len(differences),
            "different": len(differences),
            "only_before": len(before.keys() - after.keys()),
            "only_after": len(after.keys() - before.keys()),
        },
        "only_before": sorted(before.keys() - after.keys()),
        "only_after": sorted(after.keys() - before.keys()),
        "by_kind": by_kind,
        "verdict_changes": dict(sorted(changes.items())),
        "moved_towards_acceptance": [d["id"] for d in differences if d["moved_towards_acceptance"]],
        "differences": sorted(
            differences,
            key=lambda d: (not d["moved_towards_acceptance"], KINDS.index(d["kind"]), d["id"]),
        ),
    }


# -- writing ---------------------------------------------------------------------------------


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _shared_prefix(ids: list[str]) -> str:
    """The corpus file's name that every id starts with (``h100/``), which the README's
    tables leave out; empty when the ids do not share one."""
    heads = {i.split("/", 1)[0] + "/" for i in ids if "/" in i}
    if len(heads) == 1 and all("/" in i for i in ids):
        return heads.pop()
    return ""


def why(difference: dict[str, Any]) -> str:
    """The why column's first draft: each changed gate with its reason, else the row's."""
    parts = [
        f"{gate} added: {text['after']}"
        if "after" in text
        else f"{gate} gone (was: {text['before']})"
        for gate, text in difference["gate_reasons"].items()
    ]
    if not parts:
        after = difference["after"]
        parts.append(after["reason"] or f"now {after['described']}")
    return "; ".join(parts)


def markdown(result: dict[str, Any]) -> str:
    """The README's table (record / before / now / why), one row per differing record,
    moves towards acceptance first, then by kind."""
    counts, set_aside = result["counts"], result["set_aside"]
    aside = f", {', '.join(set_aside)} set aside" if set_aside else ""
    lines = [
        f"Compared by verdict, stage and failing gates{aside}: {counts['same']} of "
        f"{counts['both']} rows the same, {counts['different']} differ "
        f"({counts['only_before']} only before, {counts['only_after']} only after).",
        "",
    ]
    differences = result["differences"]
    prefix = _shared_prefix([d["id"] for d in differences])
    moved = result["moved_towards_acceptance"]
    if moved:
        names = ", ".join(f"`{i.removeprefix(prefix)}`" for i in moved)
        lines += [f"Moved towards acceptance (check these first): {names}.", ""]
    if not differences:
        return "\n".join([*lines, "No record's verdict or failing gates changed."]) + "\n"
    if prefix:
        lines += [f"Record ids without their `{prefix}` prefix.", ""]
    lines += ["| record | before | now | why |", "|---|---|---|---|"]
    for d in differences:
        record = f"`{d['id'].removeprefix(prefix)}`"
        cells = [record, d["before"]["described"], d["after"]["described"], why(d)]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _print_summary(result: dict[str, Any]) -> None:
    counts = result["counts"]
    console.print(
        f"{counts['both']} records in both: [green]{counts['same']} same[/], "
        f"[bold]{counts['different']} differ[/]; {counts['only_before']} only before, "
        f"{counts['only_after']} only after"
    )
    table = Table("kind", "records", "ids", show_edge=False)
    for kind, ids in result["by_kind"].items():
        if ids:
            listed = ", ".join(ids[:8]) + (f", ... ({len(ids) - 8} more)" if len(ids) > 8 else "")
            table.add_row(kind, str(len(ids)), listed)
    if result["differences"]:
        console.print(table)
    for change, count in result["verdict_changes"].items():
        console.print(f"  {change}: {count}")
    if result["moved_towards_acceptance"]:
        ids = ", ".join(result["moved_towards_acceptance"])
        console.print(f"[bold yellow]moved towards acceptance[/] (check first): {ids}")


@app.command()
def main(
    before: Annotated[Path, typer.Argument(help="the committed audit: summary.json or folder")],
    after: Annotated[Path, typer.Argument(help="the new audit: folder, summary or throughput")],
    overlay: Annotated[
        list[Path] | None,
        typer.Option(help="a later partial re-judgement replacing BEFORE's rows (repeatable)"),
    ] = None,
    set_aside: Annotated[
        list[str] | None, typer.Option(help="a gate or rule left out of the comparison")
    ] = None,
    markdown_out: Annotated[
        Path | None, typer.Option("--markdown", help="write the table here (else stdout)")
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write everything here")] = None,
) -> None:
    """Compare AFTER's verdicts with BEFORE's (overlaid), record by record."""
    aside = frozenset(set_aside or [])
    try:
        before_kind, rows = load(before, "before")
        inputs = [{"path": str(before), "kind": before_kind, "rows": len(rows)}]
        for number, path in enumerate(overlay or [], 1):
            kind, later = load(path, f"overlay {number}")
            inputs.append(
                {
                    "path": str(path),
                    "kind": kind,
                    "rows": len(later),
                    "replaced": len(later.keys() & rows.keys()),
                }
            )
            rows |= later
        after_kind, now = load(after, "after")
    except InputError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    result = {
        "schema": SCHEMA,
        "before": inputs[0],
        "overlays": inputs[1:],
        "after": {"path": str(after), "kind": after_kind, "rows": len(now)},
        "set_aside": sorted(aside),
        **compare(rows, now, aside),
    }
    text = markdown(result)
    if markdown_out is not None:
        markdown_out.write_text(text)
    else:
        typer.echo(text, nl=False)
    if json_out is not None:
        json_out.write_text(json.dumps(result, indent=1) + "\n")
    _print_summary(result)


if __name__ == "__main__":
    app()
