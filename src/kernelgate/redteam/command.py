"""The body of ``kernelgate calibrate``: progress, the confusion matrix, margins, times.

Kept out of ``cli.py`` so the command line stays a thin shell over ``runner.calibrate``.
"""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelgate.progress import work_progress
from kernelgate.redteam.catalog import entries
from kernelgate.redteam.runner import (
    CAUGHT,
    CPU_ONLY,
    DEVICE_ONLY,
    ENTRY_TIMEOUT,
    ERROR,
    OTHER_GATE,
    PASSED,
    Calibration,
    EntryResult,
    calibrate,
)

OUTCOME_STYLE = {
    CAUGHT: "green",
    OTHER_GATE: "yellow",
    PASSED: "bold red",
    DEVICE_ONLY: "cyan",
    CPU_ONLY: "cyan",
    ERROR: "bold red",
    "rejected": "bold red",
}


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def print_calibration(cal: Calibration, console: Console) -> None:
    """The per-entry table, the confusion matrix, per-gate catches, margins and times."""
    table = Table(title=f"red team ({cal.device})")
    for column in ("defect", "intended", "rejected by", "outcome", "seconds"):
        table.add_column(column, overflow="fold")
    for r in cal.defects:
        detail = r.detail if r.outcome in (DEVICE_ONLY, CPU_ONLY, ERROR) else ""
        table.add_row(
            r.name,
            ", ".join(r.intended_gates),
            ", ".join(r.rejected_by) or "-",
            f"[{OUTCOME_STYLE[r.outcome]}]{r.outcome}[/]" + (f": {detail}" if detail else ""),
            f"{r.seconds:.1f}",
        )
    console.print(table)

    controls = Table(title="positive controls")
    for column in ("control", "verdict", "rejected by", "seconds"):
        controls.add_column(column, overflow="fold")
    for r in cal.controls:
        style = OUTCOME_STYLE[PASSED] if r.outcome != PASSED else "green"
        controls.add_row(
            r.name,
            f"[{style}]{r.verdict}[/]" + (f": {r.detail}" if r.detail else ""),
            ", ".join(r.rejected_by) or "-",
            f"{r.seconds:.1f}",
        )
    console.print(controls)

    matrix = Table(title="confusion matrix")
    matrix.add_column("kernels")
    matrix.add_column("rejected by an intended gate", justify="right")
    matrix.add_column("rejected only by another gate", justify="right")
    matrix.add_column("passed", justify="right")
    matrix.add_column("not run (device-only, cpu-only / error)", justify="right")
    confusion = cal.confusion()
    matrix.add_row(
        f"defective ({len(cal.defects)})",
        str(len(confusion[CAUGHT])),
        str(len(confusion[OTHER_GATE])),
        str(len(confusion[PASSED])),
        f"{len(confusion[DEVICE_ONLY]) + len(confusion[CPU_ONLY])} / {len(confusion[ERROR])}",
    )
    rejected = [r for r in cal.controls if r.outcome == "rejected"]
    errored = [r for r in cal.controls if r.outcome == ERROR]
    matrix.add_row(
        f"controls ({len(cal.controls)})",
        "-",
        str(len(rejected)),
        str(len(cal.controls) - len(rejected) - len(errored)),
        f"0 / {len(errored)}",
    )
    console.print(matrix)

    gates = Table(title="catches per gate")
    for column in ("gate", "defects rejected", "of which intended", "controls rejected"):
        gates.add_column(column, justify="right" if column != "gate" else "left")
    for gate, row in cal.gate_catches().items():
        gates.add_row(gate, str(row["defects"]), str(row["intended"]), str(row["controls"]))
    console.print(gates)

    margins = Table(title="error-model separation (worst error/bound)")
    for column in ("error model", "largest honest", "at", "smallest defective", "at", "separation"):
        margins.add_column(column, overflow="fold")
    for model, m in cal.margins().items():
        margins.add_row(
            model,
            _fmt(m["largest_honest"]),
            m["largest_honest_at"] or "-",
            _fmt(m["smallest_defective"]),
            m["smallest_defective_at"] or "-",
            _fmt(m["separation"]),
        )
    console.print(margins)

    times = cal.times()
    console.print(
        f"time per kernel: median {_fmt(times['median_s'])} s, worst {_fmt(times['worst_s'])} s"
        f" ({times['worst'] or '-'}); total {cal.seconds:.1f} s"
    )
    missed = confusion[OTHER_GATE] + confusion[PASSED] + confusion[ERROR]
    if cal.ok:
        console.print(
            "[bold green]every defect run was rejected by an intended gate and no control "
            "was rejected[/]"
        )
    else:
        if missed:
            console.print(
                f"[bold red]defects not rejected by an intended gate[/]: {', '.join(missed)}",
                highlight=False,
            )
        bad = [r.name for r in cal.controls if r.outcome != PASSED]
        if bad:
            console.print(
                f"[bold red]controls rejected or failed[/]: {', '.join(bad)}", highlight=False
            )


def calibrate_command_body(
    *,
    device: str,
    json_out: Path | None,
    only: list[str] | None,
    jobs: int | None,
    timeout: float,
    console: Console,
    errors: Console,
    entry_timeout: float = ENTRY_TIMEOUT,
) -> None:
    """Run the calibration with a progress bar, print it, write JSON, exit 0 / 1.

    Every entry that runs runs in a child process of its own, even with one job on the CPU
    (``runner.calibrate``'s ``in_children``), so that ``entry_timeout`` holds for each."""
    from kernelgate.errors import KernelgateError
    from kernelgate.pipeline import resolve_device

    device = resolve_device(device)
    try:
        selected = entries(only)
    except KeyError as exc:
        raise KernelgateError(str(exc.args[0])) from None
    finished: list[EntryResult] = []
    started = time.monotonic()

    @functools.cache
    def machine() -> dict[str, Any]:
        """The calibration's ``verdict.environment``, worked out once (on a device it
        initialises CUDA in this process), not for each of the JSON's rewrites."""
        from kernelgate.verdict import environment

        return environment(device, device)

    def write(cal: Calibration, pending: list[str]) -> None:
        """The JSON so far: rewritten after every entry, so a run cut at a time limit (a
        device call) still leaves every finished row, marked incomplete with what is left."""
        assert json_out is not None
        cal.environment = machine()
        data = cal.to_dict() | {"complete": not pending, "pending": pending}
        json_out.parent.mkdir(parents=True, exist_ok=True)
        partial = json_out.with_name(json_out.name + ".partial")
        partial.write_text(json.dumps(data, indent=2))
        partial.replace(json_out)

    with work_progress(errors, "kernels") as progress:
        task = progress.add_task("calibrating", total=len(selected))

        def on_result(result: EntryResult) -> None:
            progress.update(task, description=f"{result.name}: {result.outcome}")
            progress.advance(task)
            finished.append(result)
            if json_out is not None:
                done = {r.name for r in finished}
                write(
                    Calibration(device, list(finished), round(time.monotonic() - started, 2)),
                    [e.name for e in selected if e.name not in done],
                )
            if not errors.is_terminal:  # a log (a device run cut at its limit) keeps each one
                rejected = f", rejected by {', '.join(result.rejected_by)}" * bool(
                    result.rejected_by
                )
                errors.print(
                    f"{result.name}: {result.outcome} ({result.verdict}{rejected}; "
                    f"{result.seconds:.1f} s)",
                    highlight=False,
                    markup=False,
                    soft_wrap=True,
                )

        cal = calibrate(
            device,
            only,
            jobs=jobs,
            timeout=timeout,
            on_result=on_result,
            entry_timeout=entry_timeout,
            in_children=True,
        )
    print_calibration(cal, console)
    if json_out is not None:
        write(cal, [])
        console.print(f"calibration written to {json_out}")
    raise typer.Exit(0 if cal.ok else 1)


HOSTILE_STYLE = {"held off": "green", "not held off": "bold red", "not run": "cyan"}


def print_hostile(suite: Any, console: Console) -> None:
    """One row per attack: what it tried, the outcome, what stopped it; then the tally."""
    from kernelgate.redteam.hostile.runner import BREACHED, HELD, SKIPPED

    table = Table(title=f"hostile candidates ({suite.device})")
    for column in ("attack", "what it tried", "outcome", "what stopped it"):
        table.add_column(column, overflow="fold")
    for r in suite.results:
        outcome = f"[{HOSTILE_STYLE[r.outcome]}]{r.outcome}[/]"
        if r.findings:
            outcome += ": " + "; ".join(r.findings)
        elif r.detail:
            outcome += f" ({r.detail})"
        table.add_row(f"{r.name}\n[dim]{r.kind}[/]", r.tries, outcome, r.stopped_by or "-")
    console.print(table)
    counts = suite.counts()
    flips = sum("verdict-flip" in r.failed_checks for r in suite.results)
    crashes = sum("judge-crash" in r.failed_checks for r in suite.results)
    outlived = sum("outlived" in r.failed_checks for r in suite.results)
    console.print(
        f"{counts[HELD]} held off, {counts[BREACHED]} not held off, {counts[SKIPPED]} not run; "
        f"verdict flips {flips}, judge crashes {crashes}, attacks that outlived the "
        f"verification {outlived}; {suite.seconds:.1f} s",
        highlight=False,
    )
    isolation = sorted({r.isolation for r in suite.results if r.isolation})
    console.print(
        "isolation reported by the judge: " + (" | ".join(isolation) if isolation else "none"),
        highlight=False,
    )
    if suite.ok:
        console.print("[bold green]every attack that ran was held off[/]")
    else:
        console.print(
            "[bold red]not held off[/]: " + ", ".join(r.name for r in suite.breached),
            highlight=False,
        )


def hostile_command_body(
    *,
    device: str,
    json_out: Path | None,
    only: list[str] | None,
    jobs: int | None,
    console: Console,
    errors: Console,
    in_audit: bool = False,
) -> None:
    """Run the hostile-candidate suite with a progress bar, print it, write JSON, exit 0 / 1:
    each attack against its own ``verify`` or, ``in_audit``, all of them as records of one
    audit among honest records (``hostile/mixed.py``)."""
    from kernelgate.errors import KernelgateError
    from kernelgate.pipeline import resolve_device
    from kernelgate.redteam.hostile import mixed
    from kernelgate.redteam.hostile.catalog import attacks
    from kernelgate.redteam.hostile.runner import AttackResult, run_suite

    device = resolve_device(device)
    try:
        selected = mixed.audit_attacks(only) if in_audit else attacks(only)
    except (KeyError, ValueError) as exc:
        raise KernelgateError(str(exc.args[0])) from None
    with work_progress(errors, "records" if in_audit else "attacks") as progress:
        if in_audit:
            records = len(selected) + mixed.MIXED_HONEST
            task = progress.add_task(f"auditing {records} records", total=records)
            result: Any = mixed.run_mixed_audit(
                device,
                [a.name for a in selected],
                workers=jobs or 2,
                on_progress=lambda done: progress.update(task, completed=done),
            )
        else:
            task = progress.add_task("attacking the judge", total=len(selected))

            def on_result(attack: AttackResult) -> None:
                progress.update(task, description=f"{attack.name}: {attack.outcome}")
                progress.advance(task)

            result = run_suite(device, only, jobs=jobs or 2, on_result=on_result)
    (print_mixed_audit if in_audit else print_hostile)(result, console)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result.to_dict(), indent=2))
        console.print(f"hostile-candidate report written to {json_out}")
    raise typer.Exit(0 if result.ok else 1)


def print_mixed_audit(audit: Any, console: Console) -> None:
    """One row per record of the mixed audit: its attack (or honest), the row it got, the
    outcome and what stopped it; then the run's own findings and the tally."""
    from kernelgate.redteam.hostile.mixed import LEFT_OUT

    table = Table(title=f"hostile records in an audit ({audit.device})")
    for column in ("record", "attack", "row", "outcome", "what stopped it"):
        table.add_column(column, overflow="fold")
    for r in audit.records:
        row = "no row" if r.verdict is None else r.verdict + (f" ({r.stage})" if r.stage else "")
        outcome = (
            "[green]as expected[/]" if r.ok else "[bold red]not held[/]: " + "; ".join(r.findings)
        )
        table.add_row(
            r.record_id,
            f"{r.attack}\n[dim]{r.kind}[/]" if r.attack else "[dim]honest[/]",
            row,
            outcome,
            escape(r.stopped_by) if r.attack else f"expected {r.expected}",
        )
    console.print(table)
    for finding in audit.findings:
        console.print(f"[bold red]{escape(finding)}[/]", highlight=False)
    hostile = [r for r in audit.records if r.attack]
    console.print(
        f"audit exit {audit.audit_exit}, audit-report exit {audit.report_exit}; "
        f"{sum(r.ok for r in audit.records if not r.attack)} of "
        f"{len(audit.records) - len(hostile)} honest rows intact, "
        f"{sum(r.ok for r in hostile)} of {len(hostile)} hostile records held; "
        f"{audit.seconds:.1f} s",
        highlight=False,
    )
    console.print(f"isolation: {audit.isolation or 'not reported'}", highlight=False)
    console.print(
        "left out: " + "; ".join(f"{name} ({why})" for name, why in LEFT_OUT.items()),
        highlight=False,
    )
    if audit.ok:
        console.print("[bold green]the audit finished with every record as it must be[/]")
    else:
        console.print("[bold red]the mixed audit did not hold[/]")
