"""``verify``: reference + candidate -> contract -> gates -> verdict.

The reference and the oracle run here, in the judge. The candidate runs only in the worker
that ``WorkerSession`` owns; what comes back is bytes, judged here.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from kernelgate.contract.derive import contract_for, require_supported_dtypes
from kernelgate.contract.load import load_contract
from kernelgate.contract.spec import Contract
from kernelgate.domain import unguarded_preconditions
from kernelgate.domain import verified_domain as narrowed_domain
from kernelgate.errors import KernelgateError, UnsupportedDtypeError
from kernelgate.formats.kernelbench import (
    candidate_backend,
    check_candidate_source,
    load_reference,
)
from kernelgate.formats.problem import (
    MODEL_CLASS,
    Problem,
    judge_declared_shapes,
    reference_weights,
    sizes_of_key,
)
from kernelgate.gates import GATE_IDS, GATES
from kernelgate.gates.base import Case, Gate, GateContext, GateResult, run_gate, traced
from kernelgate.gates.cmp03_shapes import ShapesGate
from kernelgate.gates.res01_execution import ExecutionSafetyGate, sanitize_after_gates
from kernelgate.gates.res02_resources import ResourcesGate, launched_extension_kernels
from kernelgate.journal import GateJournal
from kernelgate.oracle.fp64 import Oracle
from kernelgate.perf.measure import PerfOptions, PerfReport, PerfRun
from kernelgate.sandbox import confine
from kernelgate.sandbox.authorship import authorship_evidence, authorship_rule, parse_min_share
from kernelgate.sandbox.compile_budget import DEFAULT_COMPILE_TIMEOUT
from kernelgate.sandbox.sanitizer import SanitizePolicy
from kernelgate.sandbox.session import WorkerSession, settle_retired_workers
from kernelgate.sandbox.wire import UnsupportedDtype
from kernelgate.shrink import ShrinkOptions, run_shrunk_case, shrink_failures
from kernelgate.static import (
    Finding,
    RuleResult,
    StaticPolicy,
    analyse,
    rule_results,
    with_dynamic_uses,
)
from kernelgate.verdict import Outcome, Verdict, combine, environment

DEFAULT_TIMEOUT = 60.0
FRESH_INSTANCE_GATE = "ORD-02"  # always starts fresh instances of the candidate


def resolve_device(device: str) -> str:
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise KernelgateError(f"unknown device {device!r}; use cpu or cuda")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise KernelgateError(
            "--device cuda was asked for, but no CUDA device is visible; use --device cpu"
        )
    return device


def spawned_worker(
    candidate: str | Path,
    *,
    device: str,
    timeout: float,
    scratch: Path | None = None,
    compile_timeout: float = DEFAULT_COMPILE_TIMEOUT,
) -> WorkerSession:
    """A worker for ``candidate``, started now and loaded by ``verify``: importing torch
    (about 2 s) then overlaps whatever the judge does before its first call. Spawned, it holds
    no device context (CUDA starts with the load), so it takes no device memory yet."""
    session = WorkerSession(
        Path(candidate),
        [],
        device=device,
        timeout=timeout,
        scratch=scratch,
        compile_timeout=compile_timeout,
    )
    session.spawn()
    return session


def verify(
    reference: str | Path,
    candidate: str | Path,
    contract: Contract | str | Path | None = None,
    device: str = "cpu",
    *,
    timeout: float = DEFAULT_TIMEOUT,
    compile_timeout: float = DEFAULT_COMPILE_TIMEOUT,
    seed: int = 0,
    only: Sequence[str] | None = None,
    on_gate: Callable[[str, GateResult | None], None] | None = None,
    sanitize: bool | SanitizePolicy = False,
    journal: GateJournal | None = None,
    trace: Callable[[str], None] | None = None,
    scratch: Path | None = None,
    session: WorkerSession | None = None,
    forbid: Sequence[str] = (),
    hard_static: Sequence[str] = (),
    strict: bool = False,
    problem: Problem | None = None,
    perf: PerfOptions | None = None,
    min_authored_share: float | None = None,
    focus: dict[str, str] | None = None,
    shrink: ShrinkOptions | None = None,
    shrunk_cases: dict[str, Case] | None = None,
) -> Verdict:
    """Judge ``candidate`` (a file defining ``ModelNew``) against ``reference`` (KernelBench).

    Raises ``KernelgateError`` for usage or harness errors (bad files, missing ``Model`` or
    ``ModelNew``, a candidate that does not load); every behaviour of a loaded candidate,
    crashes and hangs included, becomes a gate result instead. ``sanitize`` (device mode)
    makes RES-01 also run the candidate under compute-sanitizer memcheck, racecheck,
    initcheck and synccheck, after the gates (``sanitize_after_gates``); True is
    ``SanitizePolicy()`` (every candidate, no overall budget), audits pass
    ``SanitizePolicy("authored", seconds)``. ``journal`` keeps each finished gate on disk
    and takes the gates it already holds from it instead of running them again (a judge
    killed mid-record resumes there); its key must name everything the gates depend on
    besides the two programs (device, seed, timeout, ``only``, the kernelgate code), as the
    audit's does (the sanitizer's runs come after the gates and are not journaled).
    ``trace`` gets a line as each oracle evaluation and candidate call starts and ends
    (``GateContext.step``): where a slow judge spends its time. ``scratch``: the workers'
    writable folder, for a caller that ran the same candidate before in it (the audit's old
    check): its builds are reused; by default one of the verification's own. ``session``: a
    worker the caller spawned ahead for this candidate (``spawned_worker``), so that its
    start-up overlapped the caller's own work; verify gives it the init inputs and closes it.
    ``compile_timeout``: seconds all the candidate's builds may take together (torch
    extensions, Triton compiles, a fresh instance's first call beyond ``timeout``), on top
    of ``timeout`` (sandbox/compile_budget.py); a build that fails or runs past it raises
    ``CandidateBuildError`` (a load-stage result). The verdict's ``compile_seconds`` says
    what was spent, ``compile`` who paid it.
    ``forbid``: names forbidden on top of the contract's ``rules.forbidden`` (FORBID-01);
    ``hard_static``: static rules whose findings reject, on top of the contract's
    ``rules.hard_static``. The static layer reads the candidate's files before the worker
    loads it (``static_evidence``); its findings and the rules go into the verdict.
    ``strict``: reject a kernel instead of narrowing it around a fault it does not guard
    (``unguarded_precondition``: a device fault on an offset or strided view; domain.py).
    ``problem``: a problem folder (formats/problem.py) whose ``reference.py`` is
    ``reference``: the candidate is its solution (``Model``, weights shared from the
    reference), its ``forbidden`` names join ``forbid``, and SHAPES-01 judges every declared
    shape after the gates.
    ``perf``: after the gates, time the candidate against the reference (perf/measure.py);
    the verdict's ``perf`` holds the report, a "verified speedup" only where the verdict holds.
    ``min_authored_share``: AUTH-01 in force with this minimum share of device time in the
    candidate's own kernels (sandbox/authorship.py); None: the rule is off (the verdict's
    ``authorship`` evidence is measured all the same).
    ``focus``: gate id -> the label of the one case that gate runs (``kernelgate.replay``
    re-running a stored counterexample); gates whose cases depend on each other run whole.
    ``shrink``: after the gates, reduce each failed gate's case within this budget
    (``kernelgate.shrink``: ``counterexample.shrunk``); None: no shrinking.
    ``shrunk_cases``: gate id -> a stored shrunk case that gate judges alone instead of its
    own cases (``kernelgate replay --shrunk``).
    """
    started = time.monotonic()
    device = resolve_device(device)
    try:
        min_authored_share = parse_min_share(min_authored_share)
    except ValueError as exc:
        raise KernelgateError(str(exc)) from None
    unknown = set(only or ()) - set(GATE_IDS)
    if unknown:
        raise KernelgateError(
            f"unknown gate(s) {', '.join(sorted(unknown))}; known: {', '.join(GATE_IDS)}"
        )
    program = load_reference(reference)
    class_name = MODEL_CLASS if problem is not None else "ModelNew"
    candidate_source = check_candidate_source(candidate, class_name)
    backend = candidate_backend(candidate_source)
    if backend == "cuda" and device == "cpu":
        raise KernelgateError(
            f"candidate {candidate} is a CUDA C++ extension and needs a GPU: "
            "run it with --device cuda on a machine with one"
        )
    stated = str(problem.folder) if problem is not None else str(reference)
    replay = ["kernelgate", "verify", stated, str(candidate), "--device", device]
    if isinstance(contract, str | Path):  # a contract file: replays must judge by it too
        replay += ["--contract", str(contract)]
        contract = load_contract(contract)
    if session is None:
        session = spawned_worker(
            candidate,
            device=device,
            timeout=timeout,
            scratch=scratch,
            compile_timeout=compile_timeout,
        )
    elif (session.candidate, session.device, session.timeout, session.compile_timeout) != (
        Path(candidate),
        device,
        timeout,
        compile_timeout,
    ):
        raise ValueError("the worker spawned ahead was made for another candidate or settings")
    session.init_inputs = program.init_inputs()  # sent with the load, after the spawn
    if problem is not None:  # the solution's Model, with the reference's weights
        session.model_class = MODEL_CLASS
        session.weights = lambda init, key: reference_weights(program, init, sizes_of_key(key))
    # verify's own phases before the gates, traced as a gate's steps are: the audit's judge
    # logs had nothing between the end of the KernelBench check and the first gate (1,087 s
    # of the H200 audit of 2026-12-04, benchmarks/audit_time_split.py)
    try:
        require_supported_dtypes(session.init_inputs, "get_init_inputs()")
        with traced(trace, "verify contract [verify]"):
            contract = contract or contract_for(program)  # library entry, else derived
        with traced(trace, "verify oracle [verify]"):
            oracle = Oracle(program, torch.device(device))
    except BaseException:
        session.close()
        raise
    try:
        stated_forbidden = problem.forbidden if problem is not None else ()
        findings, rules = static_evidence(
            candidate, contract, (*stated_forbidden, *forbid), hard_static
        )
    except BaseException:
        session.close()
        raise
    # FORBID-01's dynamic half: the worker watches for the same names (forbidden_watch.py)
    session.forbidden = forbidden_names(contract, (*stated_forbidden, *forbid))
    for name in forbid:  # a replay judges by the same rules
        replay += ["--forbid", name]
    for rule_id in hard_static:
        replay += ["--hard-static", rule_id]
    policy = SanitizePolicy() if sanitize is True else (sanitize or None)
    if policy is not None and policy.when == "always":
        replay.append("--sanitize")  # "authored": a finding's own replay carries it
    if strict:
        replay.append("--strict")
    perf_report: Any = None
    if not session.access_trace:  # RES-01 in CPU mode judged without the access trace
        replay.append("--no-access-trace")
    if min_authored_share is not None:
        replay += ["--min-authored-share", str(min_authored_share)]
    try:
        results: list[GateResult] = []
        with contextlib.ExitStack() as held:
            with traced(trace, "verify candidate load [verify]"):
                held.enter_context(session)
            ctx = GateContext(
                contract=contract,
                oracle=oracle,
                session=session,
                seed=seed,
                replay=replay,
                sanitize=policy is not None,
                trace=trace,
            )
            ctx.focus = dict(focus or {})
            ctx.keep_failing_cases = shrink is not None
            ran: dict[str, Gate] = {}  # the gates, for shrinking their failures
            finished: dict[str, GateResult] = {}
            if journal is not None:
                finished, ctx.incidents, ctx.halted = journal.load()
            if FRESH_INSTANCE_GATE not in finished and (not only or FRESH_INSTANCE_GATE in only):
                # its fresh instances are certain: the first one's worker starts up now, beside
                # the gates before it, instead of inside that gate's time
                ctx.prefetch_instance()
            try:
                for gate_cls in GATES:
                    gate = gate_cls()
                    ctx.gate_id = gate.id
                    if on_gate is not None:
                        on_gate(gate.id, None)
                    seen = len(ctx.incidents)
                    session.compile_context = gate.id  # who pays for what the worker builds
                    if gate.id in finished:
                        result = finished[gate.id]
                    elif only and gate.id not in only and not gate.always_runs:
                        result = gate.skipped("not selected (--only)")
                    elif shrunk_cases and gate.id in shrunk_cases:
                        result = run_shrunk_case(gate, ctx, shrunk_cases[gate.id])
                    else:
                        result = run_gate(gate, ctx)
                        ran[gate.id] = gate
                    if journal is not None and gate.id not in finished:
                        journal.record(result, ctx.incidents[seen:], ctx.halted)
                    results.append(result)
                    if on_gate is not None:
                        on_gate(gate.id, result)
                if problem is not None:  # every declared shape: a failure rejects
                    rules.append(judge_declared_shapes(ctx, problem))
                ctx.profile_authorship()  # AUTH-01's measure, after every judged call
                # what needs to know which kernels the candidate launched: RES-02 judges its
                # extension's launched kernels, RES-01's sanitizer runs on its own kernels
                profiled = authorship_evidence(ctx.authorship_record, ctx.authorship_why)
                ids = [r.id for r in results]
                at = ids.index(ResourcesGate.id)
                results[at] = launched_extension_kernels(results[at], profiled)
                if policy is not None:
                    at = ids.index(ExecutionSafetyGate.id)
                    shapes = results[ids.index(ShapesGate.id)].evidence.get("shapes")
                    results[at] = sanitize_after_gates(results[at], ctx, policy, profiled, shapes)
                if perf is not None:
                    perf_report = performance(ctx, reference, perf, contract, results, rules)
                if shrink is not None:  # after every judged and timed call: nothing changes
                    shrink_failures(ctx, ran, results, shrink)
            finally:
                ctx.close_spare()  # a prefetched worker no gate took
                settle_retired_workers()  # fresh instances told to exit: gone before the verdict
    except UnsupportedDtype as exc:
        # A derived contract checked the reference's inputs and outputs; a contract given
        # by hand did not, and the first encoding of such a value (a gate's) lands here.
        raise UnsupportedDtypeError(f"a value of the reference: {exc}") from None
    rules = with_dynamic_uses(rules, session.forbidden_uses)
    authorship = authorship_evidence(ctx.authorship_record, ctx.authorship_why)
    if min_authored_share is not None:
        rules = [*rules, authorship_rule(authorship, min_authored_share)]
    outcome, skipped = combine(results, rules, strict=strict)
    narrowed_to = (
        narrowed_domain(contract, results) if outcome is Outcome.NARROWED else None
    )  # the sub-domain in contract form, for a dispatcher
    return Verdict(
        verdict=outcome,
        reference=str(reference),
        candidate=str(candidate),
        gates=results,
        contract=contract.to_dict(),
        environment=environment(
            device,
            str(oracle.device),
            isolation=confine.weakest([session.isolation, *ctx.isolations]),
        )
        | {"judge_python": sys.executable, "candidate_backend": backend}
        | {"data_path": session.data_path_report()},
        seed=seed,
        seconds=round(time.monotonic() - started, 2),
        skipped=skipped,
        verified_domain=narrowed_to,
        compile_seconds=round(session.budget.spent, 3),
        compile=compile_evidence(session, ctx.fresh_compile_paid),
        static=findings,
        rules=rules,
        unguarded_precondition=unguarded_preconditions(results),
        strict=strict,
        problem=problem.summary() if problem is not None else None,
        perf=None if perf_report is None else perf_report.to_dict(),
        authorship=authorship,
        reference_sha256=program.sha256,
        candidate_sha256=hashlib.sha256(candidate_source.encode()).hexdigest(),
        judged_with={
            "command": replay,
            "only": list(only) if only else None,
            "timeout": timeout,
            "compile_timeout": compile_timeout,
        },
    )


def performance(
    ctx: GateContext,
    reference: str | Path,
    options: PerfOptions,
    contract: Contract,
    results: list[GateResult],
    rules: list[RuleResult],
) -> PerfReport:
    """The perf layer after the gates: timed over the narrowed domain when the verdict is
    narrowed, and a verified speedup only when the verdict holds (perf/measure.py)."""
    outcome, _ = combine(results, rules)
    if ctx.halted:  # a candidate that hung would hang every trial too
        return PerfReport(
            clock="none",
            verdict=outcome.value,
            shapes=[],
            protocol={},
            not_verified_because=f"not timed: {ctx.halted}",
        )
    domain = contract
    if outcome is Outcome.NARROWED:
        from kernelgate.domain import narrowed_contract

        domain, _ = narrowed_contract(contract, results)
    ctx.gate_id = "PERF"
    ctx.session.compile_context = "PERF"
    return PerfRun(ctx, Path(reference), options, outcome=outcome.value).run(domain)


def static_evidence(
    candidate: str | Path,
    contract: Contract,
    forbid: Sequence[str] = (),
    hard_static: Sequence[str] = (),
) -> tuple[list[Finding], list[RuleResult]]:
    """The static layer's findings over ``candidate`` and the rules they decide, under the
    contract's ``rules`` policy widened by the options. Reads files only: the candidate is
    neither imported nor run. (FORBID-01's dynamic half, in the worker, takes the same
    names, ``forbidden_names``, and adds its call sites to the same rule entry.)"""
    forbidden = forbidden_names(contract, forbid)
    hard = frozenset([*contract.rules.hard_static, *hard_static])
    float32 = any("float32" in spec.dtypes for spec in contract.tensor_inputs)
    try:
        findings = analyse(candidate, StaticPolicy(forbidden, hard, float32))
    except ValueError as exc:  # an unknown rule id in the policy: a usage error
        raise KernelgateError(str(exc)) from None
    return findings, rule_results(findings, forbidden, hard)


def forbidden_names(contract: Contract, forbid: Sequence[str] = ()) -> tuple[str, ...]:
    """FORBID-01's names: the contract's ``rules.forbidden`` and the options', once each."""
    return tuple(dict.fromkeys([*contract.rules.forbidden, *forbid]))


def compile_evidence(session: WorkerSession, fresh: list[dict[str, Any]]) -> dict[str, Any]:
    """Who paid for the candidate's builds: the budget, what was spent, and each exchange
    that built (``at``: the gate, or "load", and which instance), main instance first."""
    main = [p | {"instance": "main"} for p in session.compile_paid]
    return {
        "budget_s": session.budget.seconds,
        "spent_s": round(session.budget.spent, 3),
        "paid": main + [p | {"instance": "fresh"} for p in fresh],
    }
