"""Where an audit's judges spent their time, from the judge logs an audit folder keeps.

``judge_speed.py`` says how long records take; the audit's own ``judge.log`` per record says
on what. Every judge stamps its phases (start, old check, each gate's start and end) and,
inside a gate, each oracle evaluation, honest run, magnitude run and candidate call. This
sums, over every record of an audit folder:

- ``phases``: the waits for device memory (``admission wait``, before the check and before the
  gates), the KernelBench check, from its end to the first gate less the gates' wait (loading
  the candidate, deriving the contract), and the gates;
- ``gates``: each gate's total seconds, the part its logged steps account for, and the rest
  (``unlogged``: the judge's own arithmetic on outputs, input draws, transfers): where that
  is large, the judge itself, not the oracle or the candidate, is the cost;
- ``steps``: the logged steps by gate and kind, with their counts.

A record still being judged when the audit stopped counts with what its log holds. The
folder's ``records/`` is the audit's (``kernelgate audit --out DIR``), carried back from the
device; nothing here runs a kernel.

    PYTHONPATH=src python benchmarks/audit_time_split.py AUDIT_DIR [--json OUT.json]
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
console = Console()

STAMP = re.compile(r"^(\d\d):(\d\d):(\d\d\.\d+) (.*)$")
STEP = re.compile(r"^(\S+) (.+?) \[.*\] (\d+\.\d+) s$")
# the judge's admission (audit/judge.py ``device_admission``): one line a phase it reserved for
ADMITTED = re.compile(r"^admitted for the (old check|gates): [\d.]+ GiB reserved after ([\d.]+) s$")
GATE_END = re.compile(r"^(\S+) (pass|fail|skipped|narrowed)\b.*\((\d+\.\d+) s\)$")


def _seconds(h: str, m: str, s: str) -> float:
    return int(h) * 3600 + int(m) * 60 + float(s)


def split_log(lines: list[str]) -> dict[str, Any]:
    """One record's judge.log: phase seconds, gate totals, step seconds and counts."""
    events = [(_seconds(*m.groups()[:3]), m.group(4)) for line in lines if (m := STAMP.match(line))]
    phases: Counter[str] = Counter()
    gates: Counter[str] = Counter()
    steps: Counter[tuple[str, str]] = Counter()
    counts: Counter[tuple[str, str]] = Counter()
    check_start = check_end = first_gate = None
    gates_wait = 0.0
    for at, text in events:
        if admitted := ADMITTED.match(text):
            phases["admission wait"] += float(admitted.group(2))
            if admitted.group(1) == "gates":
                gates_wait = float(admitted.group(2))
        if text.startswith("old check ..."):
            check_start = at
        elif text.startswith("old check ") and check_end is None:
            check_end = at
        elif first_gate is None and text.endswith(" started"):
            first_gate = at
        if step := STEP.match(text):
            key = (step.group(1), step.group(2).split(":")[0])
            steps[key] += float(step.group(3))
            counts[key] += 1
        elif end := GATE_END.match(text):
            gates[end.group(1)] += float(end.group(3))
    if check_start is not None and check_end is not None:
        phases["old check"] += check_end - check_start
        if first_gate is not None:
            # less the wait for the gates' reservation, which lies in between
            phases["check end to first gate"] += first_gate - check_end - gates_wait
    return {"phases": phases, "gates": gates, "steps": steps, "counts": counts}


def split_audit(folder: Path) -> dict[str, Any]:
    logs = sorted(folder.glob("records/*/judge.log"))
    if not logs:
        raise typer.BadParameter(
            f"{folder} has no records/*/judge.log: name the folder an audit wrote "
            "(kernelgate audit --out DIR), with its records/ carried back"
        )
    phases: Counter[str] = Counter()
    gates: Counter[str] = Counter()
    steps: Counter[tuple[str, str]] = Counter()
    counts: Counter[tuple[str, str]] = Counter()
    for log in logs:
        one = split_log(log.read_text(errors="replace").splitlines())
        phases.update(one["phases"])
        gates.update(one["gates"])
        steps.update(one["steps"])
        counts.update(one["counts"])
    logged = Counter()
    for (gate, _), seconds in steps.items():
        logged[gate] += seconds
    per_gate = {
        gate: {
            "seconds": round(total, 1),
            "logged_steps_s": round(logged[gate], 1),
            "unlogged_s": round(total - logged[gate], 1),
        }
        for gate, total in sorted(gates.items(), key=lambda kv: -(kv[1] - logged[kv[0]]))
    }
    phases["gates"] = sum(gates.values())
    return {
        "schema": "kernelgate.audit-time-split/1",
        "audit": str(folder),
        "records_with_log": len(logs),
        "phases_s": {k: round(v, 1) for k, v in phases.items()},
        "gates": per_gate,
        "steps": [
            {"gate": g, "step": s, "seconds": round(v, 1), "count": counts[(g, s)]}
            for (g, s), v in steps.most_common()
        ],
        "meanings": {
            "unlogged_s": "a gate's seconds less its logged steps (oracle, honest, magnitude, "
            "candidate calls): the judge's own work on inputs and outputs",
            "check end to first gate": "loading the candidate and deriving the contract",
        },
    }


@app.command()
def main(
    audit: Annotated[Path, typer.Argument(help="An audit folder with records/.")],
    json_out: Annotated[Path | None, typer.Option("--json", help="Write the split here.")] = None,
) -> None:
    """Sum an audit's judge logs by phase, gate and step."""
    result = split_audit(audit)
    table = Table(title=f"{result['records_with_log']} judge logs in {audit}")
    for column in ("gate", "seconds", "logged steps", "unlogged"):
        table.add_column(column, justify="left" if column == "gate" else "right")
    for gate, row in result["gates"].items():
        table.add_row(gate, *(f"{row[k]:.0f}" for k in ("seconds", "logged_steps_s", "unlogged_s")))
    console.print(table)
    console.print({k: f"{v:.0f} s" for k, v in result["phases_s"].items()})
    if json_out is not None:
        json_out.write_text(json.dumps(result, indent=1) + "\n")
        console.print(f"written to {json_out}")


if __name__ == "__main__":
    app()
