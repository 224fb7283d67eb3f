"""``kernelgate tune``'s body: the search under a progress bar, its table, its JSON.

Exit codes: 0 a config was chosen (every gate verified it), 1 no config holds the
contract (nothing chosen), 2 usage or harness error (a candidate with no knobs, a bad
option), as the other commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelgate.progress import work_progress
from kernelgate.tune.run import ConfigResult, TuneOptions, Tuner, TuneReport

VERDICT_STYLE = {"verified": "green", "rejected": "bold red", "narrowed": "yellow"}


def _knobs_text(knobs: dict[str, Any]) -> str:
    parts = []
    for name, value in knobs.items():
        if isinstance(value, dict):  # an autotuned kernel: its index and config
            parts.append(f"{name}=#{value['index']} ({value['config']})")
        else:
            parts.append(f"{name}={value!r}")
    return ", ".join(parts)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def config_table(report: TuneReport) -> Table:
    table = Table(title=f"tune {Path(report.candidate).name} vs {Path(report.reference).name}")
    for column in ("config", "verdict", "failed", "ms", "speedup", "all gates", "chosen"):
        table.add_column(column, overflow="fold")
    for result in report.configs:
        chosen = report.chosen is not None and result.knobs == report.chosen
        style = VERDICT_STYLE.get(result.verdict, "bold red")
        table.add_row(
            escape(_knobs_text(result.knobs)),
            f"[{style}]{result.verdict}[/]",
            escape(", ".join(result.failed) or result.error[:120] or "-"),
            _ms(result.time_ms),
            "-" if result.speedup is None else f"{result.speedup:.3g}x",
            result.full_verdict or "-",
            "[bold green]<-[/]" if chosen else "",
        )
    return table


def tune_command_body(
    reference: Path,
    candidate: Path,
    options: TuneOptions,
    *,
    json_out: Path | None,
    console: Console,
    errors: Console,
) -> None:
    """Run the tuner and print what it found (see the module for the exit codes)."""
    from kernelgate.audit.settled import worker_tree_settled
    from kernelgate.evidence_io import write_atomic

    with worker_tree_settled(), work_progress(errors, "configs") as progress:
        task = progress.add_task("reading knobs", total=None)

        def on_config(label: str, result: ConfigResult | None) -> None:
            if result is None:
                progress.update(task, description=f"judging {label}")
            else:
                progress.advance(task)

        def on_stage(stage: str) -> None:
            progress.update(task, description=stage)

        tuner = Tuner(reference, candidate, options, on_config=on_config, on_stage=on_stage)
        cap = min(tuner.space.size, options.rounds * options.group)
        if options.max_evaluations is not None:
            cap = min(cap, options.max_evaluations)
        progress.update(task, total=cap, description="searching")
        report = tuner.run()
    console.print(config_table(report))
    if report.triton_pick is not None:
        pick = report.triton_pick
        console.print(
            f"Triton's own pick: {escape(_knobs_text(pick['knobs'] or {})) or 'not reported'}"
            f", {pick['verdict']}, {_ms(pick['time_ms'])} ms",
            highlight=False,
        )
    else:
        console.print(f"Triton's own pick: none ({report.triton_pick_why})", highlight=False)
    if report.note:
        console.print(f"[yellow]{report.note}[/]", highlight=False)
    if json_out is not None:
        text = json.dumps(report.to_dict(), indent=2)
        try:
            write_atomic(json_out, text)
        except OSError as exc:
            errors.print(f"[bold red]error:[/] cannot write {json_out}: {exc}", highlight=False)
            raise typer.Exit(2) from None
        console.print(f"tuning report written to {json_out}", highlight=False, markup=False)
    if report.chosen is None:
        console.print(
            "[bold red]no config holds the contract[/]: nothing chosen "
            f"({len(report.configs)} evaluated)",
            highlight=False,
        )
        raise typer.Exit(1)
    console.print(
        f"chosen: [bold green]{escape(_knobs_text(report.chosen))}[/], "
        f"{_ms(report.chosen_time_ms)} ms, every gate: {report.chosen_verdict}",
        highlight=False,
        soft_wrap=True,
    )
    raise typer.Exit(0)
