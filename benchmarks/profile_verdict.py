"""Where one record's verdict spends its time: cProfile of the judge and ``verify``'s trace.

``judge_speed.py`` says how long a verdict takes; this says why. Per record of a corpus it
runs the KernelBench check (as the audit's judge does, sharing the scratch folder with the
workers), then ``verify`` in this process under cProfile, and writes:

- ``<id>.trace.txt``: the check's and the verdict's seconds, then every gate's start and end
  and each oracle evaluation and candidate call inside it, timed from the verdict's start;
- ``<id>.profile.txt``: the judge's functions by cumulative and by own time. Time spent
  waiting for the worker shows as ``select``; the worker itself is another process.

The judge process imports what the audit's judge imports, with the same bytecode cache, so
first-use imports (sympy, dynamo) count as they do in an audit. Run on the H200::

    PYTHONPATH=src python benchmarks/profile_verdict.py ../shared/corpora/cuda-l1/h100.jsonl \\
        --ids h100/L1/T1,h100/L1/T36 --device cuda --out $OUT/profile --time-budget 300
"""

from __future__ import annotations

import cProfile
import io
import pstats
import shutil
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from kernelgate import bytecode
from kernelgate.audit import judge, oldcheck
from kernelgate.errors import KernelgateError
from kernelgate.formats.corpus import FORMATS, read_corpus
from kernelgate.gates.base import GateResult
from kernelgate.pipeline import verify

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
console = Console(stderr=True)
FUNCTIONS_SHOWN = 45


class Timeline:
    """Lines stamped with the seconds since the verdict started."""

    def __init__(self) -> None:
        self.origin = time.monotonic()
        self.lines: list[str] = []

    def stamp(self, text: str) -> None:
        self.lines.append(f"{time.monotonic() - self.origin:8.2f} {text}")

    def on_gate(self, gate_id: str, result: GateResult | None) -> None:
        if result is None:
            self.stamp(f"GATE {gate_id} started")
        else:
            self.stamp(f"GATE {gate_id} {result.status.value} {result.seconds:.2f} s")


def _profile_text(profile: cProfile.Profile) -> str:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("cumulative").print_stats(FUNCTIONS_SHOWN)
    stats.sort_stats("tottime").print_stats(FUNCTIONS_SHOWN)
    return out.getvalue()


@app.command()
def main(
    corpus: Annotated[Path, typer.Argument(help="A corpus `kernelgate audit` reads.")],
    ids: Annotated[str, typer.Option(help="Comma-separated record ids to profile.")],
    out: Annotated[Path, typer.Option(help="Folder for the traces and profiles.")] = Path(
        "profile-out"
    ),
    device: Annotated[str, typer.Option(help="cpu or cuda.")] = "cpu",
    timeout: Annotated[float, typer.Option(help="Seconds a candidate call may take.")] = 60.0,
    corpus_format: Annotated[
        str, typer.Option("--format", help=f"auto or one of {', '.join(FORMATS)}.")
    ] = "auto",
    time_budget: Annotated[
        float | None, typer.Option(help="Start no record after this many seconds.")
    ] = None,
) -> None:
    """Profile the verdict of each record named in --ids."""
    bytecode.use_cache()
    wanted = [i for i in ids.split(",") if i]
    try:
        records = {r.id: r for r in read_corpus(corpus, corpus_format)}
    except KernelgateError as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
    missing = [i for i in wanted if i not in records]
    if missing:
        console.print(f"[red]error:[/red] no record(s) {', '.join(missing)} in {corpus}")
        raise typer.Exit(2)
    out.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    for record_id in wanted:
        if time_budget is not None and time.monotonic() - began > time_budget:
            console.print(f"time budget spent: {record_id} and after not profiled")
            break
        record = records[record_id]
        if record.unreadable:
            console.print(f"{record_id}: unreadable ({record.unreadable}), skipped")
            continue
        work = Path(tempfile.mkdtemp(prefix="kernelgate-profile-"))
        try:
            scratch = work / "scratch"
            scratch.mkdir()
            reference, candidate = judge.materialize(record, work)
            started = time.monotonic()
            old = oldcheck.run_old_check(
                reference, candidate, device=device, timeout=timeout, scratch=scratch
            )
            check_s = time.monotonic() - started
            timeline = Timeline()
            profile = cProfile.Profile()
            profile.enable()
            try:
                verdict = verify(
                    reference,
                    candidate,
                    device=device,
                    timeout=timeout,
                    on_gate=timeline.on_gate,
                    trace=timeline.stamp,
                    scratch=scratch,
                ).verdict.value
            except KernelgateError as exc:
                verdict = f"error: {exc}"
            finally:
                profile.disable()
            verify_s = time.monotonic() - timeline.origin
            name = judge.work_folder_name(record_id)
            head = f"check {old.get('status')} {check_s:.2f} s; verdict {verdict} {verify_s:.2f} s"
            (out / f"{name}.trace.txt").write_text(head + "\n" + "\n".join(timeline.lines) + "\n")
            (out / f"{name}.profile.txt").write_text(_profile_text(profile))
            console.print(f"{record_id}: {head}")
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    app()
