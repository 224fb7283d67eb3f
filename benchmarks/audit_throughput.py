"""An audit's throughput over a fixed time, and where the host's CPU went meanwhile.

Issue 19 asks for 1,000 records an hour on one H200. A whole CUDA-L1 file takes longer than
one device call, so this runs ``kernelgate audit`` for ``--seconds`` (then stops it as a
person would, with SIGTERM: the rows finished so far stay in its store), and reports:

- ``judged_by_s``: records judged (every verdict but ``unreadable``, which costs nothing) by
  each mark in seconds since the audit's first row, and ``judged_per_hour`` over the slice.
  Two slices of the same corpus started alike judge the same records in the same order, so
  their counts at the same marks compare code against code;
- ``cpu_s_by_kind``: CPU seconds by process kind over the slice, sampled from ``/proc``
  every ``--sample-seconds``: the audit itself, the zygote, judges, workers, old checks,
  compute-sanitizer, the candidates' builds (nvcc, cicc, ptxas, g++, ninja), the rest. A
  process that lives less than one period is missed; what it used goes to none;
- the host's load and the GPU's utilisation every 20 s (``nvidia-smi`` where present);
- ``rows``: each row's id, verdict, stage, failed gates and rules, seconds, and the failed
  gates' reasons and the row's reason (each cut to 300 characters), in finishing order, so
  the slice's verdicts can be compared with a committed audit's
  (``benchmarks/audit_compare.py``) after the audit folder, often in the device's ``/tmp``,
  is gone. Schema /2: in /1, ``rows`` was the count that ``row_count`` now is.

``--profile-judges DIR`` also sets ``KERNELGATE_PROFILE_JUDGES`` for the audit (each judge's
cProfile, for ``benchmarks/judge_profile.py``); the profiles slow the judges, so a slice
measured that way is not a throughput figure. Run on the H200::

    PYTHONPATH=src python benchmarks/audit_throughput.py ../shared/corpora/cuda-l1/h100.jsonl \\
        --device cuda --workers 12 --seconds 420 --json audit-throughput-h200.json
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress

from kernelgate.audit.judge import PROFILE_JUDGES_ENV
from kernelgate.audit.report import _local_paths
from kernelgate.audit.store import STORE_NAME

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its siblings, however it is loaded
from provenance import code_commit, gpu_description, now, package_version

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
console = Console(stderr=True)

MARKS_S = (60, 120, 180, 240, 300, 360, 420, 480, 540)
BUILD_TOOLS = frozenset(
    {"nvcc", "cicc", "ptxas", "cudafe++", "fatbinary", "nvlink", "cc1plus", "c++", "g++"}
    | {"gcc", "cc", "ld", "as", "ninja", "collect2", "x86_64-linux-gnu-g++"}
)
STOP_GRACE_S = 90.0  # for the audit to keep its rows and end after SIGTERM
THROUGHPUT_SCHEMA = "kernelgate.audit-throughput/2"  # /2: ``rows`` are the rows, not a count
ROW_TEXT_CHARS = 300  # a reason kept in ``rows``


def process_kind(cmdline: str, parent_cmdline: str = "") -> str:
    """What a process is in an audit, from its command line (and its parent's: a judge is a
    fork of the zygote, so it carries the zygote's command line)."""
    if "kernelgate.sandbox.worker" in cmdline or "kernelgate.sandbox.forkserver" in cmdline:
        return "worker"
    if "compute-sanitizer" in cmdline:
        return "sanitizer"
    if "kernelgate.audit.oldcheck" in cmdline:
        return "old check"
    if "kernelgate.audit.zygote" in cmdline:
        return "judge" if "kernelgate.audit.zygote" in parent_cmdline else "zygote"
    if "kernelgate.audit.judge" in cmdline:
        return "judge"
    if " audit " in f" {cmdline} " and "kernelgate" in cmdline:
        return "audit"
    program = os.path.basename(cmdline.split(" ", 1)[0]) if cmdline else ""
    if program in BUILD_TOOLS:
        return "build"
    return "other"


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


class CpuByKind:
    """CPU seconds by ``process_kind`` of every process on the host, from ``/proc/*/stat``,
    counted from the first sample on (what a process used before it is not counted)."""

    def __init__(self) -> None:
        self.tick = os.sysconf("SC_CLK_TCK")
        self.seen: dict[tuple[int, str], float] = {}
        self.kinds: dict[tuple[int, str], str] = {}
        self.totals: dict[str, float] = {}
        self.samples = 0

    def sample(self) -> None:
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            key = (pid, fields[19])  # the start time tells a reused pid apart
            used = (int(fields[11]) + int(fields[12])) / self.tick
            if key not in self.kinds:
                self.kinds[key] = process_kind(_cmdline(pid), _cmdline(int(fields[1])))
            delta = used - self.seen.get(key, 0.0)
            self.seen[key] = used
            if self.samples and delta > 0:
                kind = self.kinds[key]
                self.totals[kind] = self.totals.get(kind, 0.0) + delta
        self.samples += 1

    def report(self) -> dict[str, float]:
        return {k: round(v, 1) for k, v in sorted(self.totals.items(), key=lambda kv: -kv[1])}


def _load_line() -> dict[str, Any]:
    """The host's load and, where nvidia-smi answers, the GPU's utilisation and memory."""
    line: dict[str, Any] = {"load1": round(os.getloadavg()[0], 2)}
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        if done.returncode == 0 and done.stdout.strip():
            line["gpu"] = done.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return line


def slice_rows(store: Path) -> list[tuple[float, dict[str, Any]]]:
    """(finish time, row) of every row of an audit store, in finishing order."""
    with sqlite3.connect(store, timeout=30) as db:
        found = [(f, json.loads(d)) for f, d in db.execute("SELECT finished, data FROM rows")]
    return sorted(found, key=lambda item: item[0])


def _cut(text: Any, limit: int = ROW_TEXT_CHARS) -> Any:
    return text[: limit - 3] + "..." if isinstance(text, str) and len(text) > limit else text


def row_digest(row: dict[str, Any]) -> dict[str, Any]:
    """What a comparison with another audit needs of one store row (audit_compare.py reads
    it), small enough to keep every row of a slice in its JSON."""
    return {
        "id": row.get("id"),
        "verdict": row.get("verdict"),
        "stage": row.get("stage"),
        "failed_gates": row.get("failed_gates", []),
        "failed_rules": row.get("failed_rules", []),
        "seconds": row.get("seconds"),
        "gate_reasons": {
            g["id"]: _cut(_local_paths(g.get("reason")))
            for g in row.get("gates") or []
            if g.get("status") == "fail"
        },
        "reason": _cut(_local_paths(row.get("reason"))),
    }


def throughput(
    rows: list[tuple[float, dict[str, Any]]], launched_at: float, ran: float
) -> dict[str, Any]:
    """Judged records by each mark (seconds since the audit's launch, wall clock) and the
    rate over the whole slice (``ran`` seconds, start-up included)."""
    finished = [f - launched_at for f, row in rows if row.get("verdict") != "unreadable"]
    judged = [t for t in finished if t <= ran]  # not what finished while it was stopping
    verdicts: dict[str, int] = {}
    for _, row in rows:
        verdicts[str(row.get("verdict"))] = verdicts.get(str(row.get("verdict")), 0) + 1
    return {
        "row_count": len(rows),
        "judged": len(judged),
        "judged_while_stopping": len(finished) - len(judged),
        "verdicts": dict(sorted(verdicts.items())),
        "judged_by_s": {str(m): sum(1 for t in judged if t <= m) for m in MARKS_S if m <= ran},
        "judged_per_hour": round(len(judged) / ran * 3600, 1) if ran > 0 else None,
        "rows": [row_digest(row) for _, row in rows],
    }


@app.command()
def main(
    corpus: Annotated[Path, typer.Argument(help="what `kernelgate audit` reads")],
    device: Annotated[str, typer.Option(help="cpu or cuda")] = "cuda",
    workers: Annotated[int, typer.Option(min=1, help="the audit's --workers")] = 12,
    seconds: Annotated[float, typer.Option(min=1.0, help="how long the audit runs")] = 420.0,
    out: Annotated[
        Path | None, typer.Option(help="the audit's folder (a fresh temporary one)")
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="where the results go")] = None,
    profile_judges: Annotated[
        Path | None, typer.Option(help="also profile every judge into this folder")
    ] = None,
    sample_seconds: Annotated[float, typer.Option(min=0.2, help="/proc sampling period")] = 1.0,
    audit_args: Annotated[
        list[str] | None, typer.Option("--audit-arg", help="passed to the audit (repeatable)")
    ] = None,
) -> None:
    """Run an audit for SECONDS, stop it, and report its throughput and the host's CPU."""
    if not corpus.exists():
        raise typer.BadParameter(f"{corpus} does not exist", param_hint="CORPUS")
    folder = out or Path(tempfile.mkdtemp(prefix="kernelgate-throughput-"))
    if (folder / STORE_NAME).exists():
        raise typer.BadParameter(f"{folder} holds an audit already: give a fresh --out")
    command = [sys.executable, "-m", "kernelgate.cli", "audit", str(corpus), "--out", str(folder)]
    command += ["--device", device, "--workers", str(workers), *(audit_args or [])]
    env = dict(os.environ)
    if profile_judges is not None:
        env[PROFILE_JUDGES_ENV] = str(profile_judges)
    cpu, loads, stop = CpuByKind(), [], threading.Event()

    def sample() -> None:
        next_load = 0.0
        while not stop.wait(sample_seconds):
            cpu.sample()
            if time.monotonic() >= next_load:
                loads.append({"t": round(time.monotonic() - started, 1), **_load_line()})
                next_load = time.monotonic() + 20.0

    cpu.sample()
    started, launched_at = time.monotonic(), time.time()
    log = (folder.parent / f"{folder.name}.log").open("wb")
    audit = subprocess.Popen(command, env=env, stdout=log, stderr=log, start_new_session=True)
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    with Progress(console=console, transient=True) as progress:
        task = progress.add_task(f"auditing {corpus.name} for {seconds:.0f} s", total=seconds)
        while (elapsed := time.monotonic() - started) < seconds and audit.poll() is None:
            progress.update(task, completed=elapsed)
            time.sleep(0.5)
    ran = time.monotonic() - started
    stop.set()
    sampler.join()
    if audit.poll() is None:
        os.killpg(audit.pid, signal.SIGTERM)
        try:
            audit.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(audit.pid, signal.SIGKILL)
            audit.wait()
    log.close()
    store = folder / STORE_NAME
    rows = slice_rows(store) if store.exists() else []
    document = {
        "schema": THROUGHPUT_SCHEMA,
        "corpus": str(corpus),
        "settings": {"device": device, "workers": workers, "seconds": seconds},
        "audit_command": command[1:],
        "audit_folder": str(folder),
        "audit_finished_by_itself": audit.returncode == 0 and ran < seconds,
        "ran_s": round(ran, 1),
        **throughput(rows, launched_at, ran),
        "cpu_s_by_kind": cpu.report(),
        "cpu_samples": cpu.samples,
        "load": loads,
        "profiled_judges": str(profile_judges) if profile_judges else None,
        "device_info": gpu_description() if device.startswith("cuda") else None,
        "torch": package_version("torch"),
        "triton": package_version("triton"),
        "code_commit": code_commit(),
        "date": now(),
    }
    text = json.dumps(document, indent=1) + "\n"
    if json_out is not None:
        json_out.write_text(text)
    console.print(
        f"{document['judged']} records judged ({document['row_count']} rows) in {ran:.0f} s: "
        f"{document['judged_per_hour']} an hour; CPU s by kind: {document['cpu_s_by_kind']}"
    )
    if json_out is None:
        sys.stdout.write(text)


if __name__ == "__main__":
    app()
