"""The ``kernelgate`` command line.

Exit codes: 0 verified, 1 rejected, 3 narrowed, 2 usage or harness error (one line on
stderr, no traceback; set KERNELGATE_DEBUG=1 to see one).
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, ParamSpec

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from kernelgate.audit.interrupt import AuditInterrupted
from kernelgate.audit.settled import SettledTree
from kernelgate.errors import KernelgateError
from kernelgate.gates import GATE_IDS
from kernelgate.gates.base import GateResult, Status
from kernelgate.progress import work_progress
from kernelgate.sandbox.compile_budget import DEFAULT_COMPILE_TIMEOUT
from kernelgate.sandbox.confine import summary_line
from kernelgate.sandbox.sanitizer_outcomes import DEFAULT_BUDGET_S as DEFAULT_SANITIZE_SECONDS
from kernelgate.shrink import ShrinkOptions
from kernelgate.verdict import Outcome, Verdict

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Contract-grade verification of GPU kernels against a float64 oracle.",
)
# Logs and CI are not terminals: give tables room instead of rich's 80-column default.
console = Console(width=None if sys.stdout.isatty() else 140)
errors = Console(stderr=True)

P = ParamSpec("P")
EVIDENCE_DIGEST_SHOWN = 12  # hex digits of the evidence's SHA-256 in the verdict line
EXIT_CODES = {Outcome.VERIFIED: 0, Outcome.REJECTED: 1, Outcome.NARROWED: 3}
STATUS_STYLE = {Status.PASS: "green", Status.FAIL: "bold red", Status.SKIPPED: "yellow"}
VERDICT_STYLE = {
    Outcome.VERIFIED: "bold green",
    Outcome.REJECTED: "bold red",
    Outcome.NARROWED: "bold yellow",
}

DeviceOption = Annotated[str, typer.Option("--device", help="cpu (Triton interpreter) or cuda")]
TimeoutOption = Annotated[
    float, typer.Option("--timeout", min=1.0, help="seconds one candidate call may take")
]
PERF_TRIALS_HELP = (
    "judged timing trials per shape, each on fresh inputs (0: 50 on a device, 8 on the CPU)"
)
PerfTrialsOption = Annotated[int, typer.Option("--perf-trials", min=0, help=PERF_TRIALS_HELP)]
BenchTrialsOption = Annotated[int, typer.Option("--trials", min=0, help=PERF_TRIALS_HELP)]
MinAuthoredShareOption = Annotated[
    float | None,
    typer.Option(
        "--min-authored-share",
        min=0.0,
        max=1.0,
        help="AUTH-01: the least share of the candidate call's device time that must run in "
        "kernels the candidate wrote (0.5 by default for kernel-writing corpora; docs/rules.md)",
    ),
]
NoAuthorshipRuleOption = Annotated[
    bool,
    typer.Option(
        "--no-authorship-rule",
        help="turn AUTH-01 off (its authorship evidence is still measured)",
    ),
]
CompileTimeoutOption = Annotated[
    float,
    typer.Option(
        "--compile-timeout",
        min=1.0,
        help="seconds the candidate's builds may take in all (torch extensions, Triton "
        "compiles, a fresh instance's first call beyond --timeout), on top of --timeout; a "
        "build that fails or runs past it rejects the candidate at the load stage",
    ),
]


def command(name: str) -> Callable[[Callable[P, None]], Callable[P, None]]:
    """``app.command(name)`` whose usage and harness errors exit 2 with one line, however
    the app is invoked (``main``, ``python -m``, or typer's test runner)."""

    def register(function: Callable[P, None]) -> Callable[P, None]:
        @functools.wraps(function)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> None:
            try:
                function(*args, **kwargs)
            except KernelgateError as exc:
                fail(str(exc))

        return app.command(name)(guarded)

    return register


def fail(message: str) -> None:
    # Never hard-wrapped: a message may end in a command to copy (a long path would break it).
    errors.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def gate_table(verdict: Verdict) -> Table:
    table = Table(title=f"{Path(verdict.candidate).name} vs {Path(verdict.reference).name}")
    table.add_column("gate")
    table.add_column("kind")
    table.add_column("status")
    table.add_column("seconds", justify="right")
    table.add_column("reason / evidence", overflow="fold")
    for gate in verdict.gates:
        reason = gate.reason
        if gate.counterexample is not None:
            reason += f"\nreplay: {gate.counterexample.replay}"
        table.add_row(
            gate.id,
            gate.kind.value,
            f"[{STATUS_STYLE[gate.status]}]{gate.status.value}[/]",
            f"{gate.seconds:.1f}",
            reason,
        )
    return table


@command("verify")
def verify_command(
    reference: Annotated[
        Path,
        typer.Argument(
            help="KernelBench reference (Model, get_inputs, get_init_inputs), or a problem "
            "folder (problem.yaml, reference.py, shapes.py; docs/usage.md)"
        ),
    ],
    candidate: Annotated[
        Path,
        typer.Argument(help="candidate file defining ModelNew (a problem's solution: Model)"),
    ],
    device: DeviceOption = "cpu",
    timeout: TimeoutOption = 60.0,
    compile_timeout: CompileTimeoutOption = DEFAULT_COMPILE_TIMEOUT,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the evidence here")] = None,
    sarif_out: Annotated[
        Path | None,
        typer.Option(
            "--sarif",
            help="also write a SARIF 2.1.0 log here: one result per failed gate or rule, "
            "located in the candidate's file (for code-scanning views in CI)",
        ),
    ] = None,
    contract_file: Annotated[
        Path | None,
        typer.Option("--contract", help="a contract file (TOML or JSON) instead of deriving one"),
    ] = None,
    only: Annotated[
        list[str] | None,
        typer.Option("--only", help=f"run only these gates ({', '.join(GATE_IDS)})"),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="base seed of every generated case")] = 0,
    sanitize: Annotated[
        bool,
        typer.Option(
            "--sanitize",
            help="also run the candidate under compute-sanitizer memcheck, racecheck, "
            "initcheck and synccheck (device mode; RES-01; device audits do so by default "
            "for candidates with kernels of their own)",
        ),
    ] = False,
    no_access_trace: Annotated[
        bool,
        typer.Option(
            "--no-access-trace",
            help="do not trace the Triton interpreter's loads and stores (CPU mode; RES-01 "
            "then judges incidents only; same as KERNELGATE_ACCESS_TRACE=0)",
        ),
    ] = False,
    forbid: Annotated[
        list[str] | None,
        typer.Option(
            "--forbid",
            help="a callable or module the candidate must not use (torch.topk, fla.ops.kda; "
            "repeatable; FORBID-01, on top of the contract's rules.forbidden)",
        ),
    ] = None,
    hard_static: Annotated[
        list[str] | None,
        typer.Option(
            "--hard-static",
            help="a static rule whose findings reject instead of flagging (STATIC-TIMING, ...; "
            "repeatable; docs/rules.md)",
        ),
    ] = None,
    strict: Annotated[
        bool,
        typer.Option(
            "--strict",
            help="reject a kernel that faults (misaligned or illegal address) on a layout the "
            "reference never sends, instead of narrowing it (unguarded_precondition)",
        ),
    ] = False,
    perf: Annotated[
        bool,
        typer.Option(
            "--perf",
            help="after the gates, time the candidate against the reference (docs/perf.md): "
            "a verified speedup only where the verdict holds",
        ),
    ] = False,
    perf_trials: PerfTrialsOption = 0,
    min_authored_share: MinAuthoredShareOption = None,
    no_authorship_rule: NoAuthorshipRuleOption = False,
    no_shrink: Annotated[
        bool,
        typer.Option(
            "--no-shrink",
            help="keep failing cases as found (no counterexample.shrunk; docs/usage.md)",
        ),
    ] = False,
    shrink_calls: Annotated[
        int,
        typer.Option("--shrink-calls", min=1, help="candidate calls shrinking may make in all"),
    ] = ShrinkOptions.max_calls,
    shrink_seconds: Annotated[
        float,
        typer.Option("--shrink-seconds", min=0.0, help="seconds shrinking may take in all"),
    ] = ShrinkOptions.max_seconds,
) -> None:
    """Verify CANDIDATE against REFERENCE and print the gates and the verdict (with --json,
    the evidence's SHA-256 too: `sha256sum FILE` must print the same; docs/security.md)."""
    from kernelgate.audit.settled import worker_tree_settled
    from kernelgate.formats.problem import load_problem
    from kernelgate.perf.measure import PerfOptions
    from kernelgate.pipeline import verify
    from kernelgate.sandbox.access_trace import TRACE_ENV

    problem = load_problem(reference) if reference.is_dir() else None
    if no_access_trace:  # read by every worker session of this verification
        os.environ[TRACE_ENV] = "0"
    with worker_tree_settled() as settled, work_progress(errors, "gates") as progress:
        task = progress.add_task("loading reference and candidate", total=len(GATE_IDS))

        def on_gate(gate_id: str, result: GateResult | None) -> None:
            if result is None:
                progress.update(task, description=f"running {gate_id}")
            else:
                progress.advance(task)

        verdict = verify(
            problem.reference if problem is not None else reference,
            candidate,
            contract=contract_file,  # verify() loads it and names it in replays
            device=device,
            timeout=timeout,
            compile_timeout=compile_timeout,
            seed=seed,
            only=only,
            on_gate=on_gate,
            sanitize=sanitize,
            forbid=forbid or (),
            hard_static=hard_static or (),
            strict=strict,
            problem=problem,
            perf=PerfOptions(trials=perf_trials) if perf else None,
            # off unless asked: a plain pair need not be a kernel-writing task
            min_authored_share=None if no_authorship_rule else min_authored_share,
            shrink=None if no_shrink else ShrinkOptions(shrink_calls, shrink_seconds),
        )
    # Every worker of the verification, and whatever its candidate left running, is gone
    # now (``worker_tree_settled``): nothing of the candidate's can rewrite the evidence.
    if json_out is not None:
        point_replays_at(verdict, json_out)
    console.print(gate_table(verdict))
    for line in shrunk_lines(verdict):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    if verdict.perf is not None:
        print_perf(verdict.perf)
    for line in static_lines(verdict):
        console.print(line, highlight=False, markup=False, soft_wrap=True)
    console.print(authorship_line(verdict), highlight=False, markup=False, soft_wrap=True)
    digest = write_evidence(json_out, verdict.to_json(), settled) if json_out else None
    if sarif_out is not None:
        write_sarif(sarif_out, verdict)
    style = VERDICT_STYLE[verdict.verdict]
    failed = ", ".join(verdict.failed_gates + verdict.failed_rules)
    console.print(
        f"verdict: [{style}]{verdict.verdict.value}[/]"
        + (f" (failed: {failed})" if failed else "")
        + f"  in {verdict.seconds:.1f} s"
        + (f" ({verdict.compile_seconds:.1f} s building)" if verdict.compile_seconds else "")
        + (f"; evidence sha256 {digest[:EVIDENCE_DIGEST_SHOWN]}..." if digest else ""),
        highlight=False,
        soft_wrap=True,
    )
    console.print(summary_line(verdict.environment.get("isolation")), highlight=False)
    if verdict.verified_domain is not None:
        console.print(
            "[yellow]verified sub-domain[/] (contract narrowed to what passed; full form in "
            "--json verified_domain): " + "; ".join(verdict.verified_domain.get("changes", [])),
            highlight=False,
        )
    for entry in verdict.unguarded_precondition:
        console.print(
            f"[yellow]unguarded precondition[/] ({entry['gate']}"
            + (", rejected: --strict" if verdict.strict else "")
            + f"): {escape(entry['summary'])}",
            highlight=False,
        )
    if verdict.skipped:
        console.print(
            f"[yellow]{len(verdict.skipped)} gate(s) skipped[/]: " + "; ".join(verdict.skipped),
            highlight=False,
        )
    if json_out is not None and digest is not None:
        # the full digest, never wrapped, to copy: `sha256sum FILE` prints the same
        console.print(
            f"evidence written to {json_out}, sha256 {digest}",
            highlight=False,
            markup=False,
            soft_wrap=True,
        )
    raise typer.Exit(EXIT_CODES[verdict.verdict])


def shrunk_lines(verdict: Verdict) -> list[str]:
    """One line per shrunk failure: the inputs it came down to, and its replay."""
    lines = []
    for gate in verdict.gates:
        shrunk = gate.counterexample.shrunk if gate.counterexample else None
        if shrunk is None:
            continue
        inputs = ", ".join(
            f"{x['name']}{x['shape']} ({len(x['values'])} value(s) besides {x['fill']})"
            for x in shrunk["inputs"]
            if "shape" in x
        )
        line = f"shrunk {gate.id}: {inputs}: {shrunk['reason']}"
        lines.append(line + (f"\n  replay: {shrunk['replay']}" if shrunk.get("replay") else ""))
    return lines


def point_replays_at(verdict: Verdict, evidence: Path) -> None:
    """Each counterexample's ``replay`` becomes ``kernelgate replay EVIDENCE --gate G`` (its
    stored case, bit for bit); the verify command that re-runs the whole gate stays beside
    it as ``verify`` (docs/evidence.md)."""
    from kernelgate.replay import replay_command

    for gate in verdict.gates:
        cx = gate.counterexample
        if cx is None or cx.verify is not None:
            continue
        cx.verify, cx.replay = cx.replay, replay_command(evidence, gate.id)
        if cx.shrunk is not None:
            cx.shrunk["replay"] = replay_command(evidence, gate.id, shrunk=True)


@command("replay")
def replay_cli(
    evidence: Annotated[Path, typer.Argument(help="a verdict's evidence (verify --json)")],
    gate: Annotated[
        list[str] | None,
        typer.Option("--gate", help="replay this failed gate only (repeatable; default: all)"),
    ] = None,
    shrunk: Annotated[
        bool,
        typer.Option("--shrunk", help="replay the stored shrunk case (counterexample.shrunk)"),
    ] = False,
    allow_changed: Annotated[
        bool,
        typer.Option(
            "--allow-changed",
            help="replay even though the reference or candidate no longer has the SHA-256 the "
            "evidence holds (said in the output)",
        ),
    ] = False,
    timeout: Annotated[
        float | None,
        typer.Option("--timeout", min=1.0, help="seconds one call may take (default: stored)"),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="write the replay report here")
    ] = None,
) -> None:
    """Re-run the failing gates of a saved verdict from its evidence and compare each failure
    with the stored one, bit for bit. Exit 1: still fails; 0: no longer fails; 2: bad input."""
    from kernelgate.audit.settled import worker_tree_settled
    from kernelgate.replay import GONE, REPRODUCED, replay

    with worker_tree_settled(), work_progress(errors, "replay") as progress:
        progress.add_task("replaying", total=None)
        report = replay(
            evidence, gate or (), shrunk=shrunk, allow_changed=allow_changed, timeout=timeout
        )
    for entry in report.changed:
        console.print(f"[yellow]changed since the verdict[/] (--allow-changed): {entry}")
    for result in report.gates:
        style = {REPRODUCED: "bold red", GONE: "bold green"}.get(result.outcome, "bold yellow")
        console.print(
            f"{result.gate}: [{style}]{result.outcome}[/] ({result.how}): {escape(result.reason)}",
            highlight=False,
            soft_wrap=True,
        )
        for line in result.differences:
            console.print(f"  differs: {escape(line)}", highlight=False, soft_wrap=True)
    if json_out is not None:
        json_out.write_text(report.to_json())
    console.print(
        f"replay: {'still fails' if report.still_fails else 'no longer fails'} "
        f"in {report.seconds:.1f} s",
        highlight=False,
    )
    raise typer.Exit(1 if report.still_fails else 0)


def print_perf(report: dict[str, Any]) -> None:
    """The perf layer's table and its one-line summary (verify --perf, bench)."""
    from kernelgate.perf.bench import PERF_COLUMNS, perf_rows, perf_summary

    title = f"performance ({report.get('clock', '')}; KB: KernelBench's method)"
    table = Table(title=title)
    for column in PERF_COLUMNS:
        table.add_column(column, overflow="fold")
    for row in perf_rows(report):
        table.add_row(*row)
    console.print(table)
    style = "bold green" if report.get("verified_speedup") is not None else "yellow"
    console.print(f"[{style}]{escape(perf_summary(report))}[/]", highlight=False, soft_wrap=True)


@command("bench")
def bench_command(
    reference: Annotated[Path, typer.Argument(help="KernelBench reference (Model)")],
    candidate: Annotated[Path, typer.Argument(help="candidate file defining ModelNew")],
    device: DeviceOption = "cpu",
    timeout: TimeoutOption = 60.0,
    trials: BenchTrialsOption = 0,
    kernelbench_trials: Annotated[
        int,
        typer.Option(
            "--kernelbench-trials",
            min=0,
            help="trials of KernelBench's own method, shown beside (0: 100 on a device, 8 on "
            "the CPU)",
        ),
    ] = 0,
    shapes: Annotated[
        int, typer.Option("--shapes", min=1, help="shapes timed: the reference's and others")
    ] = 3,
    no_gates: Annotated[
        bool,
        typer.Option(
            "--no-gates",
            help="time without judging first: outputs are still sampled and checked, but no "
            "speedup is called verified",
        ),
    ] = False,
    only: Annotated[
        list[str] | None,
        typer.Option("--only", help=f"run only these gates first ({', '.join(GATE_IDS)})"),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="base seed of every generated case")] = 0,
    json_out: Annotated[Path | None, typer.Option("--json", help="write the evidence here")] = None,
) -> None:
    """Speedup of CANDIDATE over REFERENCE as the judge measures it (docs/perf.md), beside
    KernelBench's timing of the same kernels; a verified speedup only where the verdict
    holds. Exit codes as verify's (0 with --no-gates)."""
    from kernelgate.audit.settled import worker_tree_settled
    from kernelgate.perf.bench import perf_without_gates
    from kernelgate.perf.measure import PerfOptions
    from kernelgate.pipeline import verify

    options = PerfOptions(trials=trials, kernelbench_trials=kernelbench_trials, shapes=shapes)
    with worker_tree_settled() as settled:
        if no_gates:
            report = perf_without_gates(
                reference, candidate, device=device, options=options, timeout=timeout, seed=seed
            ).to_dict()
            text, outcome = json.dumps(report, indent=2), None
        else:
            verdict = verify(
                reference,
                candidate,
                device=device,
                timeout=timeout,
                seed=seed,
                only=only,
                perf=options,
            )
            report, text, outcome = verdict.perf or {}, verdict.to_json(), verdict.verdict
    if outcome is not None:
        failed = ", ".join(verdict.failed_gates + verdict.failed_rules)
        console.print(
            f"verdict: [{VERDICT_STYLE[outcome]}]{outcome.value}[/]"
            + (f" (failed: {failed})" if failed else ""),
            highlight=False,
        )
    print_perf(report)
    if json_out is not None:
        digest = write_evidence(json_out, text, settled)
        console.print(f"evidence written to {json_out}, sha256 {digest}", markup=False)
    raise typer.Exit(0 if outcome is None else EXIT_CODES[outcome])


@command("tune")
def tune_command(
    reference: Annotated[Path, typer.Argument(help="KernelBench reference (Model)")],
    candidate: Annotated[
        Path,
        typer.Argument(
            help="Triton candidate defining ModelNew, with KERNELGATE_KNOBS or "
            "@triton.autotune configs (docs/usage.md)"
        ),
    ],
    device: DeviceOption = "cpu",
    timeout: TimeoutOption = 60.0,
    compile_timeout: CompileTimeoutOption = DEFAULT_COMPILE_TIMEOUT,
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="search rounds")] = 4,
    group: Annotated[int, typer.Option("--group", min=1, help="configs sampled per round")] = 4,
    max_evaluations: Annotated[
        int | None,
        typer.Option("--max-evaluations", min=1, help="distinct configs judged at most"),
    ] = None,
    screen: Annotated[
        list[str] | None,
        typer.Option(
            "--screen",
            help="judge each config with only these gates (repeatable; default every gate); "
            f"the chosen config is always re-verified with every gate ({', '.join(GATE_IDS)})",
        ),
    ] = None,
    trials: Annotated[
        int,
        typer.Option(
            "--trials", min=0, help="judged timing trials per config (0: 50 on a device, 8 on CPU)"
        ),
    ] = 0,
    seed: Annotated[int, typer.Option("--seed", help="seed of the search and the gates")] = 0,
    no_triton_pick: Annotated[
        bool, typer.Option("--no-triton-pick", help="do not measure Triton's own pick (GPU)")
    ] = False,
    contract_file: Annotated[
        Path | None,
        typer.Option("--contract", help="a contract file (TOML or JSON) instead of deriving one"),
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="write the tuning report here")
    ] = None,
) -> None:
    """Search CANDIDATE's launch knobs for speed; only a config every gate verifies can be
    chosen (exit 0 with a choice, 1 when no config holds the contract; docs/usage.md)."""
    from kernelgate.tune.command import tune_command_body
    from kernelgate.tune.run import TuneOptions

    options = TuneOptions(
        device=device,
        rounds=rounds,
        group=group,
        seed=seed,
        max_evaluations=max_evaluations,
        screen=tuple(screen or ()),
        trials=trials,
        timeout=timeout,
        compile_timeout=compile_timeout,
        triton_pick=not no_triton_pick,
        contract=contract_file,
    )
    tune_command_body(
        reference, candidate, options, json_out=json_out, console=console, errors=errors
    )


def write_sarif(path: Path, verdict: Verdict) -> None:
    """The verdict as SARIF 2.1.0 (``kernelgate.ci``), written whole or not at all."""
    import json

    from kernelgate import __version__
    from kernelgate.ci import sarif_log

    evidence = json.loads(verdict.to_json())  # non-finite floats as strings, as --json has them
    text = json.dumps(sarif_log(evidence, __version__), indent=2)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text + "\n")
    partial.replace(path)


def static_lines(verdict: Verdict) -> list[str]:
    """The static findings and failed rules, one line each (the --json evidence has all)."""
    lines = [f"static {f.severity.value}: {f.rule} {f.where}: {f.message}" for f in verdict.static]
    lines += [
        f"rule {r.id} failed: {r.message} (at {', '.join(r.where) or '-'})"
        for r in verdict.rules
        if r.status is Status.FAIL
    ]
    return lines


def authorship_line(verdict: Verdict) -> str:
    """One line: the share of device time in the candidate's own kernels (AUTH-01)."""
    evidence = verdict.authorship or {}
    share = evidence.get("authored_share")
    if share is None:
        return f"authorship: not measured ({evidence.get('why', 'no profiled call')})"
    return f"authorship: {share:.1%} of device time in authored kernels ({evidence.get('how')})"


def write_evidence(path: Path, text: str, settled: SettledTree) -> str:
    """Write ``verify``'s evidence whole (``write_atomic``) and return its SHA-256, once the
    verification's processes are gone; a process that would not die is a harness error
    (nothing is written while something of the candidate's may still run)."""
    from kernelgate.evidence_io import write_atomic

    if settled.surviving:
        raise KernelgateError(
            f"process(es) {', '.join(map(str, settled.surviving))} of the verification "
            f"would not die within seconds; no evidence written to {path}. Kill them and "
            "verify again"
        )
    if settled.killed:
        errors.print(
            f"[yellow]killed {len(settled.killed)} process(es) still running after the "
            "candidate's workers closed[/] (a candidate's leftover, or a worker left open): "
            + escape("; ".join(settled.killed)),
            highlight=False,
        )
    if not settled.adopting:
        errors.print(
            "[yellow]this platform cannot adopt a candidate's orphaned processes "
            "(no PR_SET_CHILD_SUBREAPER): one that escaped its worker is not killed here[/]",
            highlight=False,
        )
    try:
        return write_atomic(path, text)
    except OSError as exc:
        raise KernelgateError(f"cannot write the evidence to {path}: {exc}") from None


@command("contract")
def contract_command(
    reference: Annotated[Path, typer.Argument(help="KernelBench reference program")],
) -> None:
    """Print the contract REFERENCE gets by default (library entry or derived), as JSON."""
    from kernelgate.contract.derive import contract_for
    from kernelgate.formats.kernelbench import load_reference

    print(contract_for(load_reference(reference)).to_json())


@command("demo")
def demo_command(
    folder: Annotated[Path, typer.Argument(help="example folder with expected.toml")] = Path(
        "examples/softmax"
    ),
    device: DeviceOption = "cpu",
    timeout: TimeoutOption = 10.0,
    compile_timeout: CompileTimeoutOption = 30.0,
) -> None:
    """Verify every example candidate and check each got the verdict it should."""
    from kernelgate.demo import read_expectations
    from kernelgate.pipeline import verify

    reference, expectations = read_expectations(folder)
    table = Table(title=f"kernelgate demo: {folder} ({device})")
    for column in ("candidate", "expected", "verdict", "failed gates", "seconds", "as expected"):
        table.add_column(column)
    all_met = True
    with work_progress(errors, "candidates") as progress:
        task = progress.add_task("verifying", total=len(expectations))
        for expectation in expectations:
            progress.update(task, description=f"verifying {expectation.file.name}")
            verdict = verify(
                reference,
                expectation.file,
                device=device,
                timeout=timeout,
                compile_timeout=compile_timeout,
            )
            met = expectation.met_by(verdict)
            all_met &= met
            wanted = expectation.verdict + (f" by {expectation.gate}" if expectation.gate else "")
            table.add_row(
                expectation.file.name,
                wanted,
                f"[{VERDICT_STYLE[verdict.verdict]}]{verdict.verdict.value}[/]",
                ", ".join(verdict.failed_gates) or "-",
                f"{verdict.seconds:.1f}",
                "[green]yes[/]" if met else "[bold red]NO[/]",
            )
            progress.advance(task)
    console.print(table)
    console.print(
        "[bold green]every example got its expected verdict[/]"
        if all_met
        else "[bold red]some examples did not get their expected verdict[/]"
    )
    raise typer.Exit(0 if all_met else 1)


@command("audit")
def audit_command(
    source: Annotated[
        Path, typer.Argument(help="corpus: CUDA-L1 .jsonl, KernelBench run folder, pairs folder")
    ],
    out: Annotated[Path, typer.Option("--out", help="output folder: store, report, plots")],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            help="auto, kernelbench-run, cuda-l1, pairs or problem (a folder of runs, each "
            "solution.py and run.yaml naming its problem folder)",
        ),
    ] = "auto",
    problems: Annotated[
        Path | None,
        typer.Option("--problems", help="KernelBench problem folder (for kernelbench-run)"),
    ] = None,
    device: DeviceOption = "cpu",
    workers: Annotated[
        int | None,
        typer.Option("--workers", min=1, help="records judged at once (default: GPUs or cores)"),
    ] = None,
    executor: Annotated[str, typer.Option("--executor", help="local or ray")] = "local",
    ray_address: Annotated[
        str | None, typer.Option("--ray-address", help="Ray cluster to join (--executor ray)")
    ] = None,
    resume: Annotated[bool, typer.Option("--resume", help="continue the audit in --out")] = False,
    retry_errors: Annotated[
        bool,
        typer.Option(
            "--retry-errors",
            help="with --resume: judge again the records whose row is error or whose "
            "judging ran out of GPU memory",
        ),
    ] = False,
    rejudge: Annotated[
        list[str] | None,
        typer.Option(
            "--rejudge",
            help="with --resume: judge again the records that GATE failed (after a change "
            "to that gate); repeatable",
        ),
    ] = None,
    rejudge_record: Annotated[
        list[str] | None,
        typer.Option(
            "--rejudge-record",
            help="with --resume: judge again the record with this id (after a change that "
            "concerns it, to the oracle say); repeatable",
        ),
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="audit only the first N records")
    ] = None,
    timeout: TimeoutOption = 60.0,
    compile_timeout: CompileTimeoutOption = DEFAULT_COMPILE_TIMEOUT,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--only",
            help="run only these gates on every record (GATE[,GATE]; repeatable): a partial "
            "audit, which every row and the report name; for the audit's own mechanics, never "
            f"a full verdict ({', '.join(GATE_IDS)})",
        ),
    ] = None,
    min_authored_share: MinAuthoredShareOption = None,
    no_authorship_rule: NoAuthorshipRuleOption = False,
    host_memory: Annotated[
        float | None,
        typer.Option(
            "--host-memory",
            min=1,
            help="the host's memory in GiB, where MemTotal shows only part of it (a VM "
            "whose memory grows as it is used); the memory guard's measure (default: MemTotal)",
        ),
    ] = None,
    no_sanitize: Annotated[
        bool,
        typer.Option(
            "--no-sanitize",
            help="device audits: do not run compute-sanitizer (memcheck, racecheck, initcheck, "
            "synccheck), which by default runs on every record whose candidate launched a "
            "kernel of its own",
        ),
    ] = False,
    sanitize_seconds: Annotated[
        float,
        typer.Option(
            "--sanitize-seconds",
            min=1,
            help="device audits: seconds all four sanitizer tools may take on one record "
            "together; a tool that runs past its share is recorded as out of budget",
        ),
    ] = DEFAULT_SANITIZE_SECONDS,
    reuse: Annotated[
        list[Path] | None,
        typer.Option(
            "--reuse",
            help="the --out folder of an earlier audit (repeatable): a record whose pair it "
            "judged with the same settings, code and environment takes that row instead of "
            "being judged again (marked reused_from; see docs/audit.md)",
        ),
    ] = None,
) -> None:
    """Re-judge a corpus of accepted kernels: the old check beside the contract (exit 0 when
    the audit completes, whatever the verdicts; 130 or 143 when SIGINT or SIGTERM stops it,
    every finished row kept, and it says how to resume; see docs/audit.md)."""
    from kernelgate.audit.command import audit_command_body

    audit_command_body(
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
        rejudge=rejudge or [],
        rejudge_records=rejudge_record or [],
        limit=limit,
        timeout=timeout,
        compile_timeout=compile_timeout,
        host_memory=host_memory,
        only=only,
        min_authored_share=min_authored_share,
        authorship_rule=not no_authorship_rule,
        sanitize=not no_sanitize,
        sanitize_seconds=sanitize_seconds,
        reuse=reuse or [],
        console=console,
        errors=errors,
    )


@command("audit-report")
def audit_report_command(
    out: Annotated[Path, typer.Argument(help="an audit's output folder (holds audit.sqlite)")],
) -> None:
    """Rewrite an audit's report (summary.json, report.md, report.html, plots) from its
    store, without judging anything: for a store finished on another machine. Refused (exit
    2, no report written) when a record's evidence changed since it was judged."""
    from kernelgate.audit.report import integrity_text
    from kernelgate.audit.runner import write_report_from_store

    summary = write_report_from_store(out)
    integrity = summary["evidence_integrity"]
    for warning in integrity_text(summary)[1]:
        errors.print(f"[yellow]{escape(warning)}[/]", highlight=False)
    console.print(
        f"{summary['records']} record(s), {integrity['verified']} evidence file(s) match their "
        f"digests; report: {out / 'report.html'}",
        highlight=False,
    )


@command("audit-combine")
def audit_combine_command(
    audits: Annotated[
        list[Path],
        typer.Argument(help="audits' output folders, each with its summary.json (read only)"),
    ],
    out: Annotated[
        Path,
        typer.Option("--out", help="where summary.json, README.md and the plot are written"),
    ],
) -> None:
    """One report over several audits (the five CUDA-L1 files, say): per audit and over all
    their rows, the disagreement matrix, the headline rates, gate failures, and how many
    rows were reused from another audit (counted as records of their own audit). Nothing is
    judged; exit 2 when a folder holds no valid audit summary (see docs/audit.md)."""
    from kernelgate.audit.combine import README_NAME, write_combined

    combined = write_combined(audits, out)
    m = combined.disagreement
    console.print(
        f"{len(combined.audits)} audit(s), {combined.records} records ({combined.judged} "
        f"judged, {combined.reused} reused, {combined.unreadable} unreadable); old check "
        f"accepts and contract rejects: {m['old_accepts_contract_rejected']}; report: "
        f"{out / README_NAME}",
        highlight=False,
    )
    for name in combined.partial:
        errors.print(f"[yellow]{escape(name)}: a partial audit (--only)[/]", highlight=False)
    for name in combined.unfinished:
        errors.print(f"[yellow]{escape(name)}: not finished (records without a row)[/]")


@command("calibrate")
def calibrate_command(
    device: DeviceOption = "cpu",
    json_out: Annotated[
        Path | None, typer.Option("--json", help="write the calibration here")
    ] = None,
    only: Annotated[
        list[str] | None,
        typer.Option("--only", help="run only these red-team entries (defects or controls)"),
    ] = None,
    jobs: Annotated[
        int | None,
        typer.Option(
            "--jobs", min=1, help="verifications at once (default: cores, at most 4; 2 on a device)"
        ),
    ] = None,
    timeout: TimeoutOption = 30.0,
    entry_timeout: Annotated[
        float,
        typer.Option(
            "--entry-timeout",
            min=1.0,
            help="wall-clock seconds per entry, its whole verification: each entry runs in "
            "a fresh process of its own, killed with everything it started past this "
            "limit; the entry then gets an error row (not caught, not passed) and the "
            "others go on",
        ),
    ] = 600.0,
    hostile: Annotated[
        bool,
        typer.Option(
            "--hostile",
            help="run the hostile-candidate suite instead: attacks on the judge itself "
            "(--only names attacks; exit 0 only when every attack is held off; "
            "docs/security.md)",
        ),
    ] = False,
    in_audit: Annotated[
        bool,
        typer.Option(
            "--audit",
            help="with --hostile: mix the attacks as records among honest ones in one real "
            "`kernelgate audit` aimed at its own store and records (--only names attacks, "
            "--jobs is the audit's --workers; exit 0 only when the audit finishes with "
            "every honest row intact and every hostile record rejected or error)",
        ),
    ] = False,
) -> None:
    """Run the red team and the positive controls: confusion matrix, catches per gate,
    error-model margins, time per kernel (exit 0 when every defect run is rejected by an
    intended gate and no control is rejected; see docs/redteam.md). Each entry is verified
    in a fresh process of its own, --jobs at a time; one past --entry-timeout is killed and
    gets an error row."""
    from kernelgate.redteam.command import calibrate_command_body, hostile_command_body

    if in_audit and not hostile:
        fail("--audit runs the hostile-candidate suite inside an audit: give --hostile too")
    if hostile:
        hostile_command_body(
            device=device,
            json_out=json_out,
            only=only,
            jobs=jobs,
            console=console,
            errors=errors,
            in_audit=in_audit,
        )
        return
    calibrate_command_body(
        device=device,
        json_out=json_out,
        only=only,
        jobs=jobs,
        timeout=timeout,
        console=console,
        errors=errors,
        entry_timeout=entry_timeout,
    )


def main() -> None:
    try:
        app(standalone_mode=True)
    except KernelgateError as exc:
        errors.print(f"[bold red]error:[/] {exc}", highlight=False)
        sys.exit(2)
    except AuditInterrupted as stop:
        # The audit has killed its judges, closed its store and said what it kept. What is
        # left is the interpreter's teardown (torch, matplotlib, a report thread that ran
        # out of time), seconds on a busy machine, which a stop promised within 10 s has
        # not got: nothing of it matters any more.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(stop.exit_code)
    except KeyboardInterrupt:
        errors.print("interrupted")
        sys.exit(130)
    except Exception as exc:
        if os.environ.get("KERNELGATE_DEBUG"):
            raise
        errors.print(
            f"[bold red]internal error:[/] {type(exc).__name__}: {exc} "
            "(set KERNELGATE_DEBUG=1 for the traceback)",
            highlight=False,
        )
        sys.exit(2)


if __name__ == "__main__":
    main()
