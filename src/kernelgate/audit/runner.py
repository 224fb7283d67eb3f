"""The audit loop: read a corpus, judge every record not yet in the store, write the report.

Each record is judged in a process of its own (see ``judge.py``) by an executor, and its
row is committed to the store the moment it comes back. The loop keeps no state the store
does not have, so ``--resume`` after any kind of death (SIGKILL included) picks up exactly
the records without a row.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelgate.audit.executors import make_executor, side_by_side
from kernelgate.audit.judge import (
    AuditOptions,
    memory_failure,
    result_path,
    unreadable_row,
)
from kernelgate.audit.memory_guard import GIB, set_host_memory
from kernelgate.audit.report import write_report
from kernelgate.audit.store import STORE_NAME, ResultStore
from kernelgate.errors import KernelgateError
from kernelgate.formats.corpus import CorpusRecord, detect_format, read_corpus
from kernelgate.gates import GATE_IDS


@dataclass
class AuditPlan:
    """What the audit found before judging anything (for the progress display)."""

    records: int
    already_done: int
    format: str
    executor: str


@dataclass
class AuditOutcome:
    records: int
    judged_now: int
    out_dir: Path
    summary: dict[str, Any]


def source_digest(source: Path) -> str:
    """SHA-256 of a corpus (a file, or every file of a folder with its relative path).

    A resume is checked against the corpus's content, not its path: a store carried to
    another machine (the device, and back) resumes there only on the same records.
    """
    digest = hashlib.sha256()
    files = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
    for path in files:
        digest.update(str(path.relative_to(source) if path != source else path.name).encode())
        digest.update(b"\0")
        with path.open("rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


# The share of the pool's workers that judges records deferred for memory together, before
# the last resort of one at a time: the records a full machine defers are its largest, and
# a few of them fit where the whole pool did not.
RETRY_POOL_SHARE = 4


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
    seed: int = 0,
    host_memory_gib: float | None = None,
    on_plan: Callable[[AuditPlan], None] | None = None,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> AuditOutcome:
    """Audit SOURCE into OUT_DIR; raises ``KernelgateError`` only for usage errors.

    ``host_memory_gib`` is the host's memory where ``MemTotal`` shows only part of it (see
    ``memory_guard``); it changes when judges are stopped for memory, never a verdict.
    """
    from kernelgate.pipeline import resolve_device

    device = resolve_device(device)
    set_host_memory(None if host_memory_gib is None else int(host_memory_gib * GIB))
    unknown = sorted(set(rejudge) - set(GATE_IDS))
    if unknown:
        raise KernelgateError(f"unknown gate(s) for --rejudge: {', '.join(unknown)}")
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
        "seed": seed,
    }
    pool = make_executor(executor, workers=workers, device=device, ray_address=ray_address)
    try:
        store = ResultStore.open(out_dir, resume=resume, settings=settings)
    except BaseException:
        pool.close()
        raise
    try:

        def forget(ids: set[str]) -> None:
            """Drop the rows of ``ids`` and their judges' results: judged afresh."""
            store.forget(ids)
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
        if on_plan is not None:
            on_plan(
                AuditPlan(len(records), len(records) - len(todo), resolved_format, pool.description)
            )
        options = AuditOptions(str(out_dir.resolve()), device=device, timeout=timeout, seed=seed)
        if todo:
            store.begin_run({"workers": pool.workers, "executor": pool.description})

        def keep(record: CorpusRecord, row: dict[str, Any]) -> None:
            store.put(position[record.id], row)
            if on_row is not None:
                on_row(row)

        # the run's wall time counts even if it is killed with every judge still busy
        alive = store.heartbeat() if todo else contextlib.nullcontext()
        with alive:
            for record in (r for r in todo if r.unreadable is not None):
                keep(record, unreadable_row(record))

            def judge_deferred(records: list[CorpusRecord], sizes: list[int] | None = None) -> None:
                """Once more with fewer judges beside them, then one at a time with the
                machine to itself; what fails alone is the record's own row."""
                for few in retry_pool_sizes(pool.workers) if sizes is None else sizes:
                    if not records:
                        return
                    retry = make_executor(
                        executor, workers=few, device=device, ray_address=ray_address
                    )
                    again: list[CorpusRecord] = []
                    try:
                        for record, row in retry.judge_all(records, options):
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
            earlier = [r for r in todo if r.id in deferred_ids]
            readable = [r for r in todo if r.unreadable is None and r.id not in deferred_ids]
            few, *then = retry_pool_sizes(pool.workers)
            beside = few if earlier and readable and pool.workers > few else 0
            main, retry = pool, None
            if beside:
                main, retry = (
                    make_executor(executor, workers=n, device=device, ray_address=ray_address)
                    for n in (pool.workers - beside, beside)
                )
            else:
                judge_deferred(earlier)
            streams = [main.judge_all(readable, options)]
            if retry is not None:
                streams.append(retry.judge_all(earlier, options))
            newly_deferred: list[CorpusRecord] = []
            still_deferred: list[CorpusRecord] = []
            try:
                for index, (record, row) in side_by_side(*streams):
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
            finally:
                for side in (main, retry):
                    if side is not None and side is not pool:
                        side.close()
            judge_deferred(still_deferred, then or [1])
            judge_deferred(newly_deferred)
        summary = write_report(out_dir, store.rows(), settings, store.runs(), corpus_ids)
        return AuditOutcome(len(records), len(todo), out_dir, summary)
    finally:
        store.close()
        pool.close()
