"""How an audit's wall time depends on admission, replayed from the rows of a real audit.

Device time is scarce, so admission policies are compared here first, on what an audit
measured: each judged row's own duration (``seconds`` less its admission waits), the part of
it the KernelBench check took (``judge_started_s`` + ``old_check_seconds``) and its reference's
sizes (``admission.elements`` / ``work_elements``), from which today's model
(``audit/admission.py``) gives each phase's reservation. A discrete-event replay then runs
the rows in corpus order on ``--workers`` judges sharing ``--budget-gib``, first come first
served, as the ledger does, under two policies:

- ``one``: one reservation, the gates' estimate, from the check to the last gate (before
  the two-phase admission);
- ``two``: the check's estimate for the check, then the gates' for the gates, the second
  asked for with the record's first place in line (``device_admission``).

It is a model: durations are those the judges took beside each other on the audited
device, the reservations are estimates (not what the device held), and a record that never
finished in that audit is missing. It ranks policies; the audit on the device measures them.

    PYTHONPATH=src python benchmarks/admission_sim.py AUDIT.sqlite [--workers 16]
        [--budget-gib 120] [--json OUT.json]
"""

from __future__ import annotations

import heapq
import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from kernelgate.audit import admission

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
console = Console()
GIB = admission.GIB


@dataclass(frozen=True)
class Phase:
    seconds: float
    reserved: int


@dataclass(frozen=True)
class Record:
    id: str
    check: Phase
    gates: Phase


def records_of(store: Path) -> list[Record]:
    """The judged rows of an audit store (``audit.sqlite``), in corpus order."""
    connection = sqlite3.connect(f"file:{store}?mode=ro", uri=True)
    try:
        rows = [
            json.loads(d) for (d,) in connection.execute("SELECT data FROM rows ORDER BY position")
        ]
    finally:
        connection.close()
    records = []
    for row in rows:
        sizes = row.get("admission") or {}
        if row.get("verdict") == "unreadable" or "elements" not in sizes:
            continue
        elements, work = sizes["elements"], int(sizes.get("work_elements") or 0)
        seconds = max(0.0, float(row.get("seconds") or 0.0) - admission.row_waited_seconds(row))
        check = (row.get("judge_started_s") or 0.0) + (row.get("old_check_seconds") or 0.0)
        check = min(seconds, float(check))
        records.append(
            Record(
                row["id"],
                Phase(check, admission.estimate_old_check_bytes(elements, work)),
                Phase(seconds - check, admission.estimate_device_bytes(elements, work)),
            )
        )
    return records


def replay(records: list[Record], workers: int, budget: int, policy: str) -> float:
    """Wall seconds of the audit under ``policy`` (``one`` or ``two``): judges take records
    in order; a phase waits, first come first served, until it fits beside the phases
    running (or runs alone); a record's gates keep the place in line of its check."""
    if policy == "one":
        phases = [[Phase(r.check.seconds + r.gates.seconds, r.gates.reserved)] for r in records]
    else:
        phases = [[r.check, r.gates] for r in records]
    now, held, free_workers, next_record = 0.0, 0, workers, 0
    line: list[tuple[float, int, int]] = []  # (first asked, record, phase index)
    first_asked: dict[int, float] = {}
    running: list[tuple[float, int, int, int]] = []  # (end, record, phase index, reserved)
    while next_record < len(records) or line or running:
        while free_workers and next_record < len(records):
            first_asked[next_record] = now
            line.append((now, next_record, 0))
            next_record += 1
            free_workers -= 1
        line.sort()
        while line:
            _, index, k = line[0]
            phase = phases[index][k]
            if running and held + phase.reserved > budget:
                break
            line.pop(0)
            held += phase.reserved
            heapq.heappush(running, (now + phase.seconds, index, k, phase.reserved))
        now, index, k, reserved = heapq.heappop(running)
        held -= reserved
        if k + 1 < len(phases[index]):
            line.append((first_asked[index], index, k + 1))
        else:
            free_workers += 1
    return now


@app.command()
def main(
    store: Annotated[Path, typer.Argument(help="an audit's audit.sqlite")],
    workers: Annotated[list[int] | None, typer.Option(help="judges at once (repeatable)")] = None,
    budget_gib: Annotated[
        list[float] | None, typer.Option(help="device budget in GiB (repeatable)")
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the figures here")] = None,
) -> None:
    """Replay an audit's rows under one- and two-phase admission and print the wall times
    (by default for 12, 16 and 24 judges on an H100's and an H200's budgets)."""
    workers = workers or [12, 16, 24]
    budget_gib = budget_gib or [67.0, 120.0]
    if not store.is_file():
        raise typer.BadParameter(f"{store} is not a file: give an audit folder's audit.sqlite")
    records = records_of(store)
    if not records:
        raise typer.BadParameter(f"{store} has no judged row with admission sizes")
    check_share = sum(r.check.seconds for r in records) / sum(
        r.check.seconds + r.gates.seconds for r in records
    )
    table = Table(
        title=f"{len(records)} judged rows of {store}; the check: {check_share:.0%} of judge time"
    )
    for column in (
        "workers",
        "budget GiB",
        "one phase s",
        "two phases s",
        "two / one",
        "judged/h (two)",
    ):
        table.add_column(column, justify="right")
    results = []
    for budget in budget_gib:
        for size in workers:
            one = replay(records, size, int(budget * GIB), "one")
            two = replay(records, size, int(budget * GIB), "two")
            per_hour = 3600 * len(records) / two
            table.add_row(
                str(size),
                f"{budget:g}",
                f"{one:.0f}",
                f"{two:.0f}",
                f"{two / one:.3f}",
                f"{per_hour:.0f}",
            )
            results.append(
                {
                    "workers": size,
                    "budget_gib": budget,
                    "one_phase_s": round(one, 1),
                    "two_phase_s": round(two, 1),
                    "judged_per_hour_two": round(per_hour),
                }
            )
    console.print(table)
    if json_out is not None:
        json_out.write_text(
            json.dumps(
                {
                    "store": str(store),
                    "records": len(records),
                    "check_share": round(check_share, 3),
                    "model": "replay of the rows' own durations; estimates from audit/admission.py",
                    "results": results,
                },
                indent=1,
            )
            + "\n"
        )
        console.print(f"written to {json_out}")


if __name__ == "__main__":
    app()
