"""Train one small language model per member on MQAR with our kernels (issue 22 item 4).

Every requested member (default: all five) gets the same model (kernelgate.training.mqar's
MQARConfig: width, depth, heads, data) and the same seeds; each is first checked for one
optimizer step against its naive recurrence (step_check), then trained until --steps or its
share of --time-budget runs out. After every member the JSON report is rewritten and the
plots redrawn, so a run killed at a device limit keeps every member it finished.

The device run (docs/kernels/training.md):

    PYTHONPATH=src python benchmarks/mqar_train.py --device cuda --time-budget 480 \\
        --out $OUT/mqar-h200.json --plots-dir $OUT

A CPU smoke run (the Triton interpreter; tiny config, a few steps):

    PYTHONPATH=src python benchmarks/mqar_train.py --tiny --device cpu --members gdn \\
        --steps 4 --out /tmp/mqar-cpu.json --plots-dir /tmp
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import torch
import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from kernelgate.training.mqar import MEMBERS, MQARConfig, step_check, train

ROOT = Path(__file__).resolve().parents[1]
console = Console()
app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def device_slug(device: torch.device) -> str:
    """'nvidia-h200' for an H200, 'cpu' on the CPU: the report's file name."""
    if device.type != "cuda":
        return device.type
    return re.sub(r"[^a-z0-9]+", "-", torch.cuda.get_device_name(device).lower()).strip("-")


def environment(device: torch.device) -> dict[str, Any]:
    """Where, when and with what the run was made (recorded in the report)."""
    import triton

    return {
        "device": str(device),
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "triton_interpret": os.environ.get("TRITON_INTERPRET"),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "command": " ".join([sys.executable, *sys.argv]),
    }


def with_overrides(config: MQARConfig, overrides: list[str]) -> MQARConfig:
    """``config`` with ``field=value`` overrides, each value parsed as its field's default's
    type (so a device run can change the task or the learning rate without an edit)."""
    current = config.to_dict()
    changes: dict[str, Any] = {}
    for item in overrides:
        name, sep, text = item.partition("=")
        if not sep or name not in current:
            raise typer.BadParameter(
                f"--set {item!r}: expected FIELD=VALUE, FIELD in {list(current)}"
            )
        kind = type(current[name])
        if kind is bool:
            changes[name] = text.lower() in ("1", "true", "yes")
        elif kind is tuple:
            changes[name] = tuple(float(x) for x in text.split(","))
        else:
            changes[name] = kind(text)
    return replace(config, **changes)


def plot(report: dict[str, Any], plots_dir: Path) -> list[Path]:
    """training-loss.png (training loss, lightly smoothed, and held-out loss) and
    training-recall.png (held-out recall) per member, against the training step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots_dir.mkdir(parents=True, exist_ok=True)
    title = f"MQAR, {report['environment']['gpu'] or report['environment']['device']}"
    if report.get("tiny"):
        title += " (tiny config: CPU smoke run, not a result)"
    paths = []
    for kind in ("loss", "recall"):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for member, run in report["members"].items():
            history = run["history"]
            if kind == "loss" and history["train"]:
                steps = [r["step"] for r in history["train"]]
                ema, smooth = 0.0, []
                # Bias-corrected EMA over ~20 steps: fresh batches make the raw loss noisy.
                for n, r in enumerate(history["train"], start=1):
                    ema = 0.95 * ema + 0.05 * r["loss"]
                    smooth.append(ema / (1 - 0.95**n))
                (line,) = ax.plot(steps, smooth, label=f"{member} (train, EMA)")
                ev = history["eval"]
                ax.plot(
                    [r["step"] for r in ev],
                    [r["loss"] for r in ev],
                    "o",
                    ms=3,
                    color=line.get_color(),
                )
            elif kind == "recall":
                ev = history["eval"]
                ax.plot(
                    [r["step"] for r in ev], [r["recall"] for r in ev], "o-", ms=3, label=member
                )
        ax.set_xlabel("training step")
        if kind == "loss":
            ax.set_ylabel("cross-entropy at query positions (dots: held-out)")
            ax.set_yscale("log")
        else:
            ax.set_ylabel("held-out recall (argmax accuracy at queries)")
            ax.set_ylim(0, 1.02)
            chance = 1 / report["config"]["num_kv_pairs"]
            ax.axhline(chance, color="grey", ls=":", lw=1, label="1 / pairs")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        path = plots_dir / f"training-{kind}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        paths.append(path)
    return paths


def save(report: dict[str, Any], out: Path, plots_dir: Path | None) -> None:
    """Rewrite the report and redraw the plots (after every member)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    if plots_dir is not None and report["members"]:
        report["plots"] = [str(p) for p in plot(report, plots_dir)]
        out.write_text(json.dumps(report, indent=1) + "\n")


@app.command()
def main(
    members: Annotated[str, typer.Option(help="Comma-separated members to train.")] = ",".join(
        MEMBERS
    ),
    steps: Annotated[int, typer.Option(help="Training steps per member (at most).")] = 3000,
    time_budget: Annotated[
        float | None,
        typer.Option(help="Seconds for the whole run, shared among the members still to run."),
    ] = None,
    device: Annotated[str | None, typer.Option(help="cuda or cpu (default: cuda if any).")] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="JSON report (default benchmarks/results/mqar-<device>.json)."),
    ] = None,
    plots_dir: Annotated[
        Path | None, typer.Option(help="Folder for training-loss.png and training-recall.png.")
    ] = ROOT / "docs" / "kernels",
    tiny: Annotated[bool, typer.Option(help="The tiny CPU test config (a smoke run).")] = False,
    seed: Annotated[int, typer.Option(help="Seed of weights and data.")] = 0,
    check: Annotated[
        bool, typer.Option(help="Run step_check for each member before training.")
    ] = True,
    check_batch: Annotated[int, typer.Option(help="Batch size of the step check.")] = 4,
    overrides: Annotated[
        list[str] | None,
        typer.Option(
            "--set", help="Override a config field, e.g. --set lr=3e-3 --set num_kv_pairs=8."
        ),
    ] = None,
) -> None:
    """Train each member on MQAR; write the report and the loss and recall plots."""
    start = time.perf_counter()
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if dev.type == "cpu":
        # The kernels are defined at their first use (in the first forward), after this.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    names = [m.strip() for m in members.split(",") if m.strip()]
    unknown = [m for m in names if m not in MEMBERS]
    if unknown:
        raise typer.BadParameter(f"unknown members {unknown}; choose from {MEMBERS}")
    config = with_overrides(MQARConfig.tiny() if tiny else MQARConfig(), overrides or [])
    out = out or ROOT / "benchmarks" / "results" / f"mqar-{device_slug(dev)}.json"
    report: dict[str, Any] = {
        "schema": "kernelgate.mqar-train/1",
        "tiny": tiny,
        "environment": environment(dev),
        "config": config.to_dict(),
        "steps_requested": steps,
        "time_budget_s": time_budget,
        "seed": seed,
        "members": {},
    }
    console.print(f"MQAR on {dev} ({report['environment']['gpu'] or 'no GPU'}): {names}")
    for i, member in enumerate(names):
        member_start = time.perf_counter()
        share = None
        if time_budget is not None:
            share = (time_budget - (member_start - start)) / (len(names) - i)
        entry: dict[str, Any] = {"time_share_s": share}
        if check:
            t0 = time.perf_counter()
            entry["step_check"] = step_check(
                member, config, seed, device=dev, batch_size=min(check_batch, config.batch_size)
            )
            entry["step_check"]["seconds"] = time.perf_counter() - t0
            sc = entry["step_check"]
            console.print(
                f"[bold]{member}[/] step check (AdamW, fp64 model, fp32 kernels vs fp64 "
                f"naive): update rel err {sc['update_rel_err']:.2e} (L2 "
                f"{sc['update_rel_err_l2']:.2e}), gradients {sc['grad_rel_err']:.2e}, "
                f"loss diff {sc['loss_diff']:.1e}"
            )
        budget = None if share is None else share - (time.perf_counter() - member_start)
        with Progress(
            TextColumn("[bold]{task.fields[member]}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            console=console,
        ) as progress:
            task = progress.add_task("", total=steps, member=member, status="")
            recall = [float("nan")]

            def on_record(kind: str, rec: dict[str, Any], task: Any = task, recall=recall) -> None:
                if kind == "eval":
                    recall[0] = rec["recall"]
                    progress.update(task, completed=rec["step"])
                else:
                    progress.update(
                        task,
                        completed=rec["step"],
                        status=f"loss {rec['loss']:.3f} recall {recall[0]:.3f}",
                    )

            history = train(
                member,
                config,
                steps,
                device=dev,
                seed=seed,
                time_budget=budget,
                on_record=on_record,
            )
        entry["history"] = history
        last = history["eval"][-1]
        console.print(
            f"[bold]{member}[/]: {history['parameters']:,} parameters, "
            f"{history['steps_done']} steps in {history['seconds']:.0f} s "
            f"(stopped by {history['stopped_by']}), held-out recall {last['recall']:.3f}, "
            f"loss {last['loss']:.3f}"
        )
        report["members"][member] = entry
        report["seconds"] = time.perf_counter() - start
        save(report, out, plots_dir)
        console.print(f"written to {out}")


if __name__ == "__main__":
    app()
