"""Where an audit's judges spend their CPU, from the profiles they wrote.

An audit's throughput on one GPU host is bounded by the host's cores (docs/audit.md): a dozen
judges, each given one core, share it with their workers and the candidates' builds. With
``KERNELGATE_PROFILE_JUDGES=DIR`` set, each judge writes a cProfile of its record timed in
the judge's CPU seconds (``audit/judge.py``); this sums those profiles over every record
and names the functions that cost the most, by their own time and by what runs under them,
with each one's share of all judge CPU.

    KERNELGATE_PROFILE_JUDGES=/tmp/prof kernelgate audit CORPUS --out DIR --device cuda
    PYTHONPATH=src python benchmarks/judge_profile.py /tmp/prof [--top 30] [--json OUT.json]
"""

from __future__ import annotations

import json
import pstats
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
console = Console()


def _where(key: tuple[str, int, str]) -> str:
    """``file:line(function)`` with the path cut to what names it (kernelgate/..., torch/...)."""
    filename, line, function = key
    if filename == "~":
        return function  # a builtin or a C method
    parts = Path(filename).parts
    for anchor in ("kernelgate", "torch", "triton", "numpy"):
        if anchor in parts:
            filename = "/".join(parts[parts.index(anchor) :])
            break
    else:
        filename = Path(filename).name
    return f"{filename}:{line}({function})"


def summarize(folder: Path, top: int = 30) -> dict[str, Any]:
    """The summed profile of every ``*.prof`` in ``folder``: total CPU seconds, records, and
    the ``top`` functions by own time and by cumulative time."""
    files = sorted(folder.glob("*.prof"))
    if not files:
        raise typer.BadParameter(f"no *.prof files in {folder}: was KERNELGATE_PROFILE_JUDGES set?")
    stats = pstats.Stats(str(files[0]))
    for path in files[1:]:
        stats.add(str(path))
    table: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    total = float(stats.total_tt)  # type: ignore[attr-defined]

    def ranked(column: int) -> list[dict[str, Any]]:
        rows = sorted(table.items(), key=lambda kv: -kv[1][column])[:top]
        return [
            {
                "where": _where(key),
                "calls": value[1],
                "own_s": round(value[2], 2),
                "cumulative_s": round(value[3], 2),
                "share": round(value[column] / total, 4) if total else 0.0,
            }
            for key, value in rows
        ]

    return {
        "schema": "kernelgate.judge-profile/1",
        "records": len(files),
        "judge_cpu_s": round(total, 1),
        "judge_cpu_s_per_record": round(total / len(files), 2),
        "by_own_time": ranked(2),
        "by_cumulative_time": ranked(3),
    }


def _print(summary: dict[str, Any], key: str, title: str) -> None:
    table = Table(title=title)
    for column in ("where", "calls", "own_s", "cumulative_s", "share"):
        table.add_column(column, justify="left" if column == "where" else "right")
    for row in summary[key]:
        table.add_row(*(str(row[c]) for c in ("where", "calls", "own_s", "cumulative_s", "share")))
    console.print(table)


@app.command()
def main(
    folder: Annotated[Path, typer.Argument(help="the folder KERNELGATE_PROFILE_JUDGES named")],
    top: Annotated[int, typer.Option(help="functions listed in each ranking")] = 30,
    json_out: Annotated[Path | None, typer.Option("--json", help="also write the summary")] = None,
) -> None:
    """Sum the judges' CPU profiles and list where the CPU went."""
    if not folder.is_dir():
        raise typer.BadParameter(f"{folder} is not a folder")
    summary = summarize(folder, top)
    console.print(
        f"{summary['records']} judges, {summary['judge_cpu_s']} CPU s "
        f"({summary['judge_cpu_s_per_record']} s a record)"
    )
    _print(summary, "by_own_time", "by own time")
    _print(summary, "by_cumulative_time", "by cumulative time")
    if json_out is not None:
        json_out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    app()
