"""The audit loop: read a corpus, judge every record not yet in the store, write the report.

Each record is judged in a process of its own (see ``judge.py``) by an executor, and its
row is committed to the store the moment it comes back. The loop keeps no state the store
does not have, so ``--resume`` after any kind of death (SIGKILL included) picks up exactly
the records without a row. SIGINT and SIGTERM stop it in a few seconds (``interrupt.py``):
the judges are killed, rows that come back after the signal are not stored, and
``AuditInterrupted`` says what was kept.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelgate.audit.executors import Executor, make_executor, side_by_side
from kernelgate.audit.identity import judging_environment, source_digest
from kernelgate.audit.interrupt import (
    JUDGES_GONE_SECONDS,
    POLL_SECONDS,
    AuditInterrupted,
    Interruption,
)
from kernelgate.audit.judge import (
    AuditOptions,
    code_digest,
    memory_failure,
    result_path,
    unreadable_row,
)
from kernelgate.audit.memory_guard import GIB, set_host_memory
from kernelgate.audit.report import write_report
from kernelgate.audit.reuse import (
    ReuseSource,
    open_source,
    plan_reuse,
    reused_row,
    row_key,
    settings_key,
)
from kernelgate.audit.store import STORE_NAME, ResultStore
from kernelgate.errors import KernelgateError
from kernelgate.formats.corpus import CorpusRecord, detect_format, read_corpus
from kernelgate.gates import GATE_IDS
from kernelgate.sandbox.compile_budget import DEFAULT_COMPILE_TIMEOUT
from kernelgate.sandbox.sanitizer_outcomes import DEFAULT_BUDGET_S, TOOLS


@dataclass
class AuditPlan:
    """What the audit found before judging anything (for the progress display)."""

    records: int
    already_done: int
    format: str
    executor: str
    # the line that says what is reused from where (None: no --reuse and nothing repeats)
    reuse: str | None = None


@dataclass
class AuditOutcome:
    records: int
    judged_now: int  # judged by this run (not counting rows reused: ``reused_now``)
    out_dir: Path
    summary: dict[str, Any]
    reused_now: int = 0


# The share of the pool's workers that judges records deferred for memory together, before
# the last resort of one at a time: the records a full machine defers are its largest, and
# a few of them fit where the whole pool did not.
RETRY_POOL_SHARE = 4


def gate_selection(only: Sequence[str] | None) -> tuple[str, ...] | None:
    """``--only``'s gates in the pipeline's order, each once (None: every gate); each entry
    may itself list gates separated by commas. Unknown gates are a usage error."""
    if not only:
        return None
    named = [gate.strip() for entry in only for gate in str(entry).split(",") if gate.strip()]
    unknown = sorted(set(named) - set(GATE_IDS))
    if unknown or not named:
        raise KernelgateError(
            f"unknown gate(s) for --only: {', '.join(unknown) or repr(','.join(only))}; "
            f"known: {', '.join(GATE_IDS)}"
        )
    return tuple(gate for gate in GATE_IDS if gate in named)


def retry_pool_sizes(workers: int) -> list[int]:
    """Pool sizes for records deferred for memory: a quarter of the pool, then one."""
    few = workers // RETRY_POOL_SHARE
    return [few, 1] if few > 1 else [1]


def write_report_from_store(out_dir: Path) -> dict[str, Any]:
    """Rewrite the report of ``out_dir`` from its store alone (no device, nothing judged)."""
    if not (out_dir / STORE_NAME).exists():
        raise KernelgateError(f"{out_dir} holds no audit store ({STORE_NAME}); run an audit first")
    store = ResultStore(out_dir / STORE_NAME)
    try:
        return write_report(
            out_dir, store.rows(), store.settings(), store.runs(), store.corpus_ids()
        )
    finally:
        store.close()


def report_within(
    out_dir: Path,
    store: ResultStore,
    settings: dict[str, Any],
    corpus_ids: list[str],
    interruption: Interruption,
) -> bool:
    """Write the report of an interrupted audit if that fits in the stop's time; whether it
    was written.

    The report of a large store takes seconds (matplotlib's plots, mostly), and a stop must
    not: it is written in a thread while the stop's time lasts (and no second signal came);
    past that the audit exits without it and says how to get it (``audit-report``). Each
    file is replaced whole (``write_report``), so none is left half written.
    """
    rows, runs = store.rows(), store.runs()  # the store's connection belongs to this thread
    outcome: dict[str, bool] = {}

    def write() -> None:
        try:
            write_report(out_dir, rows, settings, runs, corpus_ids)
        except Exception:  # the stop goes on; the message says the report is not written
            outcome["written"] = False
        else:
            outcome["written"] = True

    writer = threading.Thread(target=write, name="kernelgate-report", daemon=True)
    writer.start()
    while writer.is_alive() and interruption.seconds_left() > 0 and not interruption.hurried:
        writer.join(POLL_SECONDS)
    return outcome.get("written", False)


def run_audit(
    source: Path,
    out_dir: Path,
    *,
    fmt: str = "auto",
    problems: Path | None = None,
    device: str = "cpu",
    workers: int | None = None,
    executor: str = "local",
    ray_address: str | None = None,
    resume: bool = False,
    retry_errors: bool = False,
    rejudge: tuple[str, ...] = (),
    rejudge_records: tuple[str, ...] = (),
    limit: int | None = None,
    timeout: float = 60.0,
    compile_timeout: float = DEFAULT_COMPILE_TIMEOUT,
    seed: int = 0,
    only: Sequence[str] | None = None,
    host_memory_gib: float | None = None,
    min_authored_share: float | None = None,
    authorship_rule: bool = True,
    sanitize: bool = True,
    sanitize_seconds: float = DEFAULT_BUDGET_S,
    reuse: Sequence[Path] = (),
    on_plan: Callable[[AuditPlan], None] | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> AuditOutcome:
    """Audit SOURCE into OUT_DIR; raises ``KernelgateError`` only for usage errors.

    ``reuse``: output folders of earlier audits whose rows stand for records of the same
    pair judged the same way, instead of judging them again (``reuse.py``); this audit's
    own rows stand for repeats of a pair within it, with or without ``reuse``.

    ``host_memory_gib`` is the host's memory where ``MemTotal`` shows only part of it (see
    ``memory_guard``); it changes when judges are stopped for memory, never a verdict.

    ``only`` runs just those gates on every record (``kernelgate audit --only``): a partial
    audit, which the store's settings, every row and the report say, and which a resume with
    another selection may not continue.

    ``min_authored_share``: AUTH-01's minimum for every record (None: each format's default,
    sandbox/authorship.py: 0.5 for kernel-writing formats, off for plain pairs);
    ``authorship_rule`` False turns AUTH-01 off.

    ``sanitize`` (device audits): RES-01 runs compute-sanitizer memcheck, racecheck,
    initcheck and synccheck on each record whose candidate launched a kernel of its own,
    within ``sanitize_seconds`` for all four (sandbox/sanitizer.py); False: none run.

    SIGINT and SIGTERM (in the main thread) stop the audit within seconds and raise
    ``AuditInterrupted``: every stored row stays, the records being judged have none.
    """
    from kernelgate.pipeline import resolve_device

    interruption = Interruption()
    with interruption.handling_signals():
        device = resolve_device(device)
        set_host_memory(None if host_memory_gib is None else int(host_memory_gib * GIB))
        unknown = sorted(set(rejudge) - set(GATE_IDS))
        if unknown:
            raise KernelgateError(f"unknown gate(s) for --rejudge: {', '.join(unknown)}")
        selected = gate_selection(only)
        if (rejudge or retry_errors or rejudge_records) and not resume:
            raise KernelgateError(
                "--retry-errors, --rejudge and --rejudge-record act on a store: add --resume"
            )
        resolved_format = detect_format(source) if fmt == "auto" else fmt
        records = read_corpus(source, resolved_format, problems=problems)
        corpus_ids = [record.id for record in records]
        strangers = sorted(set(rejudge_records) - set(corpus_ids))
        if strangers:
            example = f" (e.g. {corpus_ids[0]!r})" if corpus_ids else ""
            raise KernelgateError(
                f"--rejudge-record: no record with id {', '.join(map(repr, strangers))} in "
                f"{source}; ids are as the report's rows give them{example}"
            )
        if limit is not None:
            records = records[:limit]
        settings = {
            "source": str(source.resolve()),
            "source_sha256": source_digest(source),
            "format": resolved_format,
            "problems": str(problems.resolve()) if problems else None,
            "device": device,
            "timeout": timeout,
            # seconds of building each record's verification may spend (compile_budget.py)
            "compile_timeout": compile_timeout,
            "seed": seed,
            # the gates every row ran (None: all): a resume with another selection is refused
            "only": list(selected) if selected else None,
        }
        if min_authored_share is not None or not authorship_rule:  # absent: the default
            settings["authorship_rule"] = min_authored_share if authorship_rule else "off"
        if sanitize and not sanitize_seconds > 0:
            raise KernelgateError(f"--sanitize-seconds must be positive, not {sanitize_seconds}")
        if device != "cpu":  # a resume must sanitize as the rows it continues did
            settings["sanitize"] = (
                {"when": "authored", "seconds": sanitize_seconds, "tools": list(TOOLS)}
                if sanitize
                else "off"
            )
        # read before anything starts: a bad --reuse folder is a usage error (exit 2)
        own = out_dir.resolve()
        others = [f for f in dict.fromkeys(reuse) if f.resolve() != own]  # its own: used anyway
        sources = [open_source(folder) for folder in others]

        def executor_of(size: int | None) -> Executor:
            made = make_executor(
                executor,
                workers=size,
                device=device,
                ray_address=ray_address,
                interruption=interruption,
            )
            interruption.claim_signals()  # ray.init installs a SIGTERM handler of its own
            return made

        pool = executor_of(workers)
        try:
            store = ResultStore.open(out_dir, resume=resume, settings=settings)
        except BaseException:
            pool.close()
            raise
        try:
            interruption.begin_judging()
            outcome = _judge_and_report(
                records,
                corpus_ids,
                store,
                settings,
                out_dir,
                pool,
                executor_of,
                interruption,
                resolved_format=resolved_format,
                device=device,
                timeout=timeout,
                compile_timeout=compile_timeout,
                seed=seed,
                only=selected,
                authorship=(min_authored_share, authorship_rule),
                sanitize=(sanitize, sanitize_seconds),
                retry_errors=retry_errors,
                rejudge=rejudge,
                rejudge_records=rejudge_records,
                reuse_sources=sources,
                on_plan=on_plan,
                on_row=on_row,
            )
            if interruption.signum is not None:  # it came during the report, written whole
                raise AuditInterrupted(interruption.signum, report_written=True)
            return outcome
        except AuditInterrupted as stop:
            interruption.wait_for_judges(min(JUDGES_GONE_SECONDS, interruption.seconds_left()))
            wanted = {record.id for record in records}
            kept = len(store.done_ids() & wanted)
            written = stop.report_written or report_within(
                out_dir, store, settings, corpus_ids, interruption
            )
            raise AuditInterrupted(
                stop.signum,
                rows_kept=kept,
                records_left=len(wanted) - kept,
                report_written=written,
            ) from None
        except BaseException:  # the audit failed: its judges must not outlive it
            interruption.close()
            interruption.wait_for_judges()
            raise
        finally:
            store.close()
            pool.close()


def _judge_and_report(
    records: list[CorpusRecord],
    corpus_ids: list[str],
    store: ResultStore,
    settings: dict[str, Any],
    out_dir: Path,
    pool: Executor,
    executor_of: Callable[[int | None], Executor],
    interruption: Interruption,
    *,
    resolved_format: str,
    device: str,
    timeout: float,
    compile_timeout: float,
    seed: int,
    only: tuple[str, ...] | None,
    authorship: tuple[float | None, bool] = (None, True),
    sanitize: tuple[bool, float] = (True, DEFAULT_BUDGET_S),
    retry_errors: bool,
    rejudge: tuple[str, ...],
    rejudge_records: tuple[str, ...],
    on_plan: Callable[[AuditPlan], None] | None,
    on_row: Callable[[dict[str, Any]], None] | None,
    reuse_sources: Sequence[ReuseSource] = (),
) -> AuditOutcome:
    """Judge every record of ``records`` without a row in ``store``, then write the report.

    Every row is stored only after ``interruption.check()``: once a stop is asked, nothing
    more is stored or deferred, so a record whose judge the stop killed has no row (and
    does not pass for a memory failure).

    Before judging, each record looks for a row of the same judging in ``reuse_sources``
    and this store (``reuse.plan_reuse``): those found are stored first, as reused rows;
    a record whose pair another record of this run judges waits for that row, and is
    judged itself at the end only if that row is no final verdict.
    """
    forgotten: set[str] = set()  # records an option asked to judge again: never reused

    def forget(ids: set[str]) -> None:
        """Drop the rows of ``ids`` and their judges' results: judged afresh."""
        store.forget(ids)
        forgotten.update(ids)
        for record_id in ids:
            result_path(out_dir, record_id).unlink(missing_ok=True)

    if retry_errors:  # a judge killed for memory, say: the candidate was never judged
        troubled = store.ids_where(memory_failure)
        forget(store.error_ids() | troubled)
        for record_id in troubled:  # memory was the trouble: the pool would repeat it
            store.defer_alone(record_id, "retried after a memory failure")
    store.set_corpus(corpus_ids)  # the report says which records still lack a row
    for gate in rejudge:  # that gate changed since those rows were judged
        forget(store.failed_ids(gate))
    forget(set(rejudge_records))
    done = store.done_ids()
    position = {record.id: index for index, record in enumerate(records)}
    todo = [r for r in records if r.id not in done]
    deciding, code = settings_key(settings), code_digest()
    environment = judging_environment(device, every_gpu=True) if todo else {}
    own = ReuseSource(out_dir.resolve(), settings, store.rows(), own=True)
    plan = plan_reuse(
        todo,
        [own, *reuse_sources],
        deciding=deciding,
        code=code,
        environment=environment,
        must_judge=forgotten,
    )
    if on_plan is not None:
        on_plan(
            AuditPlan(
                len(records),
                len(records) - len(todo),
                resolved_format,
                pool.description,
                plan.line() if todo and (reuse_sources or plan.reused or plan.followers) else None,
            )
        )
    options = AuditOptions(
        str(out_dir.resolve()),
        device=device,
        timeout=timeout,
        compile_timeout=compile_timeout,
        seed=seed,
        only=only,
        min_authored_share=authorship[0],
        authorship_rule=authorship[1],
        sanitize=sanitize[0],
        sanitize_seconds=sanitize[1],
    )
    interruption.check()
    if todo:
        store.begin_run(
            {
                "workers": pool.workers,
                "executor": pool.description,
                # what a row judged now would record (the judges record their own in it)
                "environment": environment,
                "reuse": [s.label for s in reuse_sources],
            }
        )
    reused_now = 0

    def keep(record: CorpusRecord, row: dict[str, Any]) -> None:
        nonlocal reused_now
        interruption.check()  # after a stop, rows are those of killed judges: none is stored
        store.put(position[record.id], row)
        reused_now += "reused_from" in row
        if on_row is not None:
            on_row(row)
        key = plan.leaders.pop(record.id, None)
        if key is not None and row_key(row, deciding) == key:  # its repeats take this row
            for follower in plan.followers.pop(key, []):
                copied = reused_row(follower, own, row, out_dir)
                if copied is not None:
                    keep(follower, copied)
                else:  # its evidence changed since: judged at the end, as the others
                    plan.followers.setdefault(key, []).append(follower)

    # the run's wall time counts even if it is killed with every judge still busy
    alive = store.heartbeat() if todo else contextlib.nullcontext()
    with alive:
        for record in (r for r in todo if r.unreadable is not None):
            keep(record, unreadable_row(record))
        unjudged: set[str] = set()  # reused, or waiting for a row of this run to reuse
        for record, source, old in plan.reused:
            copied = reused_row(record, source, old, out_dir)
            if copied is not None:  # else its evidence changed since the plan: judged
                keep(record, copied)
                unjudged.add(record.id)
        unjudged |= {r.id for waiting in plan.followers.values() for r in waiting}

        def judge_deferred(records: list[CorpusRecord], sizes: list[int] | None = None) -> None:
            """Once more with fewer judges beside them, then one at a time with the
            machine to itself; what fails alone is the record's own row."""
            for few in retry_pool_sizes(pool.workers) if sizes is None else sizes:
                if not records:
                    return
                interruption.check()
                retry = executor_of(few)
                again: list[CorpusRecord] = []
                try:
                    with contextlib.closing(retry.judge_all(records, options)) as rows:
                        for record, row in rows:
                            interruption.check()
                            if few > 1 and memory_failure(row):
                                again.append(record)  # still deferred in the store
                            else:
                                keep(record, row | {"judged_alone": few == 1, "retry_pool": few})
                finally:
                    retry.close()
                records = again

        # Records an earlier run deferred (judges killed from outside, or out of GPU
        # memory, beside other judges) start at once, a few at a time, beside a pool
        # that judges the rest with the remaining workers: behind the pool, in a run
        # stopped at a deadline, they would never start, and before it, the machine
        # would idle while a few large records finish.
        deferred_ids = store.alone_ids()
        earlier = [r for r in todo if r.id in deferred_ids and r.id not in unjudged]
        readable = [
            r
            for r in todo
            if r.unreadable is None and r.id not in deferred_ids and r.id not in unjudged
        ]
        few, *then = retry_pool_sizes(pool.workers)
        beside = few if earlier and readable and pool.workers > few else 0
        main, retry = pool, None
        if beside:
            main, retry = (executor_of(n) for n in (pool.workers - beside, beside))
        else:
            judge_deferred(earlier)
        streams = [main.judge_all(readable, options)]
        if retry is not None:
            streams.append(retry.judge_all(earlier, options))
        newly_deferred: list[CorpusRecord] = []
        still_deferred: list[CorpusRecord] = []
        arriving = side_by_side(*streams)
        try:
            for index, (record, row) in arriving:
                interruption.check()  # a killed judge's row is no memory failure
                if index == 1:  # an earlier run's deferred record, beside the pool
                    if memory_failure(row):
                        still_deferred.append(record)
                    else:
                        keep(record, row | {"judged_alone": False, "retry_pool": few})
                elif memory_failure(row) and (main.workers > 1 or beside):
                    reason = str(row.get("reason") or "device memory incident")
                    store.defer_alone(record.id, reason)
                    newly_deferred.append(record)
                else:
                    keep(record, row)
        except BaseException:  # the judges first: then the streams can close (below)
            interruption.close()
            raise
        finally:
            arriving.close()
            for side in (main, retry):
                if side is not None and side is not pool:
                    side.close()
        interruption.check()  # a stopped executor ends its stream early, without a row
        judge_deferred(still_deferred, then or [1])
        judge_deferred(newly_deferred)
        # repeats whose pair got no final row here (an error, say): each judged after all
        repeats = plan.pending()
        if repeats:
            newly_deferred = []
            with contextlib.closing(pool.judge_all(repeats, options)) as rows:
                for record, row in rows:
                    interruption.check()
                    if memory_failure(row) and pool.workers > 1:
                        store.defer_alone(record.id, str(row.get("reason") or "memory"))
                        newly_deferred.append(record)
                    else:
                        keep(record, row)
            judge_deferred(newly_deferred)
    interruption.check()
    summary = write_report(out_dir, store.rows(), settings, store.runs(), corpus_ids)
    return AuditOutcome(len(records), len(todo) - reused_now, out_dir, summary, reused_now)
