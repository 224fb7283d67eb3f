"""``kernelgate audit``: the command's body, kept here so cli.py only declares its options."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from kernelgate.audit.interrupt import AuditInterrupted
from kernelgate.audit.report import integrity_text, partial_audit_text
from kernelgate.audit.runner import AuditPlan, gate_selection, run_audit
from kernelgate.progress import work_progress
from kernelgate.sandbox.compile_budget import DEFAULT_COMPILE_TIMEOUT
from kernelgate.sandbox.sanitizer_outcomes import DEFAULT_BUDGET_S


def resume_command(
    source: Path,
    out: Path,
    *,
    fmt: str,
    problems: Path | None,
    device: str,
    workers: int | None,
    executor: str,
    ray_address: str | None,
    limit: int | None,
    timeout: float,
    host_memory: float | None,
    only: Sequence[str] | None = None,
    compile_timeout: float = DEFAULT_COMPILE_TIMEOUT,
    min_authored_share: float | None = None,
    authorship_rule: bool = True,
    sanitize: bool = True,
    sanitize_seconds: float = DEFAULT_BUDGET_S,
    reuse: Sequence[Path] = (),
) -> str:
    """The command that continues this audit: its options, with ``--resume``.

    ``--reuse`` is repeated: the records still without a row may be found there too.

    ``--only`` is repeated as one comma-separated word: a resume must run the same gates.

    ``--retry-errors``, ``--rejudge`` and ``--rejudge-record`` are left out: the rows they
    forgot are gone from the store already, so a plain resume judges those records, and
    repeating them would forget again rows this run judged.
    """
    words = ["kernelgate", "audit", str(source), "--out", str(out)]
    optional: list[tuple[str, Any, Any]] = [
        ("--format", fmt, "auto"),
        ("--problems", problems, None),
        ("--device", device, "cpu"),
        ("--workers", workers, None),
        ("--executor", executor, "local"),
        ("--ray-address", ray_address, None),
        ("--limit", limit, None),
        ("--timeout", timeout, 60.0),
        ("--compile-timeout", compile_timeout, DEFAULT_COMPILE_TIMEOUT),
        ("--host-memory", host_memory, None),
        ("--only", ",".join(only) if only else None, None),
        ("--min-authored-share", min_authored_share, None),
        ("--sanitize-seconds", sanitize_seconds, DEFAULT_BUDGET_S),
    ]
    for option, value, default in optional:
        if value != default:
            words += [option, f"{value:g}" if isinstance(value, float) else str(value)]
    if not authorship_rule:
        words.append("--no-authorship-rule")
    if not sanitize:
        words.append("--no-sanitize")
    for folder in reuse:
        words += ["--reuse", str(folder)]
    return shlex.join([*words, "--resume"])


def interrupted_line(stop: AuditInterrupted, out: Path, resume: str) -> str:
    """The one line an interrupted audit prints: what it kept, what is left, how to go on."""
    if stop.rows_kept is None:
        kept = "before judging began, nothing stored by this run"
    else:
        kept = (
            f"{stop.rows_kept} row(s) kept in {out / 'audit.sqlite'}, "
            f"{stop.records_left} record(s) left"
        )
    report = (
        f"report of the rows kept: {out / 'report.html'}"
        if stop.report_written
        else f"report not written (write it with: kernelgate audit-report {shlex.quote(str(out))})"
    )
    return f"audit interrupted by {stop.signal_name}: {kept}; {report}; resume with: {resume}"


def audit_command_body(
    source: Path,
    out: Path,
    *,
    fmt: str,
    problems: Path | None,
    device: str,
    workers: int | None,
    executor: str,
    ray_address: str | None,
    resume: bool,
    retry_errors: bool,
    rejudge: list[str],
    rejudge_records: list[str],
    limit: int | None,
    timeout: float,
    host_memory: float | None = None,
    only: Sequence[str] | None = None,
    compile_timeout: float = DEFAULT_COMPILE_TIMEOUT,
    min_authored_share: float | None = None,
    authorship_rule: bool = True,
    sanitize: bool = True,
    sanitize_seconds: float = DEFAULT_BUDGET_S,
    reuse: Sequence[Path] = (),
    console: Console,
    errors: Console,
) -> None:
    """Run the audit with a progress bar (rate and ETA) and print where the report is."""
    progress = work_progress(errors, "records", rate=True)
    state: dict[str, Any] = {}
    selected = gate_selection(only)  # a usage error (exit 2) before anything starts

    def on_plan(plan: AuditPlan) -> None:
        errors.print(
            f"auditing {plan.records} record(s) ({plan.format}) with {plan.executor}"
            + (f"; {plan.already_done} already in the store" if plan.already_done else "")
            + (f"; partial audit, only {', '.join(selected)} (--only)" if selected else ""),
            highlight=False,
        )
        if plan.reuse is not None:
            errors.print(plan.reuse, highlight=False, soft_wrap=True)
        state["task"] = progress.add_task("judging", total=plan.records - plan.already_done)

    def on_row(row: dict[str, Any]) -> None:
        progress.update(state["task"], advance=1, description=f"{row['id']}: {row['verdict']}")
        if not errors.is_terminal:  # a log (CI, a device call): the bar draws nothing there
            task = progress.tasks[0]
            origin = row.get("reused_from")
            how = (
                f"reused from {origin.get('source') or origin.get('audit')} ({origin.get('id')})"
                if origin
                else f"in {row.get('seconds', 0):.0f} s"
            )
            errors.print(
                f"[{task.completed:.0f}/{task.total:.0f}] {row['id']}: {row['verdict']} "
                f"(old check {row.get('old_check', 'not run')}) {how}",
                highlight=False,
            )

    try:
        with progress:
            outcome = run_audit(
                source,
                out,
                fmt=fmt,
                problems=problems,
                device=device,
                workers=workers,
                executor=executor,
                ray_address=ray_address,
                resume=resume,
                retry_errors=retry_errors,
                rejudge=tuple(rejudge),
                rejudge_records=tuple(rejudge_records),
                limit=limit,
                timeout=timeout,
                compile_timeout=compile_timeout,
                only=selected,
                min_authored_share=min_authored_share,
                authorship_rule=authorship_rule,
                sanitize=sanitize,
                sanitize_seconds=sanitize_seconds,
                host_memory_gib=host_memory,
                reuse=tuple(reuse),
                on_plan=on_plan,
                on_row=on_row,
            )
    except AuditInterrupted as stop:
        resume_with = resume_command(
            source,
            out,
            fmt=fmt,
            problems=problems,
            device=device,
            workers=workers,
            executor=executor,
            ray_address=ray_address,
            limit=limit,
            timeout=timeout,
            host_memory=host_memory,
            only=selected,
            compile_timeout=compile_timeout,
            min_authored_share=min_authored_share,
            authorship_rule=authorship_rule,
            sanitize=sanitize,
            sanitize_seconds=sanitize_seconds,
            reuse=reuse,
        )
        errors.print(interrupted_line(stop, out, resume_with), highlight=False, soft_wrap=True)
        raise  # cli.main exits with stop.exit_code, at once (see there)
    summary = outcome.summary
    contract = ", ".join(f"{k} {v}" for k, v in summary["contract"].items())
    old = ", ".join(f"{k} {v}" for k, v in summary["old_check"].items())
    matrix = summary["disagreement"]
    console.print(
        f"{summary['records']} record(s), {outcome.judged_now} judged now"
        + (f", {outcome.reused_now} reused" if outcome.reused_now else ""),
        highlight=False,
    )
    if summary.get("only"):
        console.print(partial_audit_text(summary["only"]), highlight=False, soft_wrap=True)
    console.print(f"contract:  {contract}", highlight=False)
    console.print(f"old check: {old}", highlight=False)
    console.print(
        f"old check accepts but contract rejects: {matrix['old_accepts_contract_rejected']}"
        f", narrows: {matrix['old_accepts_contract_narrowed']}",
        highlight=False,
    )
    unguarded = summary.get("unguarded_precondition") or {}
    if unguarded.get("records"):
        console.print(
            f"unguarded preconditions (faults only on layouts the reference never sends): "
            f"{unguarded['records']} record(s), "
            + ", ".join(f"{k} {v}" for k, v in unguarded["by_verdict"].items()),
            highlight=False,
        )
    for warning in integrity_text(summary)[1]:
        errors.print(f"[yellow]{escape(warning)}[/]", highlight=False)
    if not summary.get("plots"):
        errors.print("[yellow]matplotlib is not installed: the report has no plots[/]")
    console.print(f"report: {out / 'report.html'} (also report.md, summary.json)", highlight=False)
