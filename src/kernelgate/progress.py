"""One progress bar for every long job (verify, demo, calibrate, audit), on stderr."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class RateColumn(ProgressColumn):
    """Items per minute, measured over the items finished in this run."""

    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        speed = task.speed
        rate = "--" if not speed else f"{60 * speed:.1f}"
        return Text(f"{rate} {self.unit}/min", style="cyan")


def work_progress(console: Console, unit: str, *, rate: bool = False) -> Progress:
    """Spinner, current item, bar, ``done/total unit``, elapsed and remaining time.

    Transient: the bar disappears when the job ends and leaves only the job's own report.
    """
    columns: list[ProgressColumn] = [
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(unit),
    ]
    if rate:
        columns.append(RateColumn(unit))
    columns += [TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn()]
    return Progress(*columns, console=console, transient=True)
