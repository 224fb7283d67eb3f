"""Where records are judged: a local pool of judge processes, or Ray tasks.

Both executors run the same function, ``judge_isolated``, which starts one judge process per
record; they differ only in where that function runs and how many run at once. So the rows
they produce are the same, and the choice is about scale: ``local`` for one machine, ``ray``
for a cluster (``--ray-address``) or to share a machine's GPUs with other Ray work.

Executors yield rows as records finish (not in corpus order), so the runner can commit each
one at once; the store's ``position`` restores corpus order for the report.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import asdict
from typing import Any, Protocol, TypeVar

from kernelgate.audit.interrupt import Interruption
from kernelgate.audit.judge import AuditOptions, error_row, judge_isolated
from kernelgate.audit.memory_guard import shared_guard
from kernelgate.errors import KernelgateError
from kernelgate.formats.corpus import CorpusRecord

EXECUTORS = ("local", "ray")
RAY_POLL_SECONDS = 0.5  # how often a Ray executor looks whether the audit is stopping
RAY_CANCEL_GRACE_SECONDS = 2.0  # between a plain cancel of Ray tasks and a forced one
CLOSE_SECONDS = 5.0  # how long ``side_by_side``, closed early, waits for its streams to close

T = TypeVar("T")


def device_count(device: str) -> int:
    """GPUs visible in device mode; cores in CPU mode: the natural number of workers."""
    if device.startswith("cuda"):
        import torch

        return max(1, torch.cuda.device_count())
    return max(1, os.cpu_count() or 1)


class Executor(Protocol):
    workers: int
    description: str

    def judge_all(
        self, records: Sequence[CorpusRecord], options: AuditOptions
    ) -> Iterator[tuple[CorpusRecord, dict[str, Any]]]: ...

    def close(self) -> None: ...


class LocalExecutor:
    """N judge processes at a time on this machine, one record each.

    Threads only wait on the judge processes (the work happens in the children), so a
    thread pool is enough to keep N processes busy. In device mode each slot owns one GPU
    (``CUDA_VISIBLE_DEVICES``); more workers than GPUs share them round-robin (an H200 holds
    several KernelBench records at once; a record that runs out of memory is an error row).
    Each judge gets an equal share of the cores for its CPU threads: N judges each running
    torch with every core oversubscribe the machine many times over.
    """

    def __init__(
        self, workers: int | None, device: str, interruption: Interruption | None = None
    ) -> None:
        self.device = device
        self.interruption = interruption
        gpus = device_count(device) if device.startswith("cuda") else 0
        self.workers = workers or device_count(device)
        self._gpus: queue.Queue[str | None] = queue.Queue()
        for slot in range(self.workers):
            self._gpus.put(str(slot % gpus) if gpus else None)
        self.threads = max(1, (os.cpu_count() or 1) // self.workers)
        self.guard = shared_guard()  # acts only while several judges run on this host
        self.description = f"local, {self.workers} worker(s)" + (
            f" on {gpus} GPU(s)" if gpus else ""
        )

    def _judge(self, record: CorpusRecord, options: AuditOptions) -> dict[str, Any]:
        gpu = self._gpus.get()
        try:
            return judge_isolated(
                record,
                options,
                gpu=gpu,
                threads=self.threads,
                guard=self.guard,
                interruption=self.interruption,
            )
        finally:
            self._gpus.put(gpu)

    def judge_all(
        self, records: Sequence[CorpusRecord], options: AuditOptions
    ) -> Iterator[tuple[CorpusRecord, dict[str, Any]]]:
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="kernelgate-judge")
        try:
            futures: dict[Future[dict[str, Any]], CorpusRecord] = {
                pool.submit(self._judge, record, options): record for record in records
            }
            pending = set(futures)
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                if self.interruption is not None and self.interruption.closed:
                    return  # its rows are not stored; start no more judges (below)
                for future in done:
                    record = futures[future]
                    try:
                        yield record, future.result()
                    except Exception as exc:  # judge_isolated does not raise; belt and braces
                        yield record, error_row(record, f"executor: {exc}", 0.0)
        finally:  # closed early (the audit failed, or was interrupted): start no more judges
            pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        pass


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise KernelgateError(
            "--executor ray needs the ray package, which is not installed: "
            "pip install 'kernelgate[ray]' (or pip install ray), or use --executor local"
        ) from None
    return ray


def _judge_in_ray_task(record: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """Ray task body: Ray has already set CUDA_VISIBLE_DEVICES to the GPU it granted."""
    return judge_isolated(CorpusRecord.from_dict(record), AuditOptions(**options))


class RayExecutor:
    """One Ray task per record: ``num_gpus=1`` in device mode, ``num_cpus=1`` on the CPU.

    With ``address`` it joins a running cluster (where kernelgate must be installed and the
    output folder should be on a shared file system, since judges write evidence there);
    without, it starts a local instance with ``workers`` CPUs, or reuses one already started
    in this process.
    """

    def __init__(
        self,
        workers: int | None,
        device: str,
        address: str | None,
        interruption: Interruption | None = None,
    ) -> None:
        self.ray = _import_ray()
        self.device = device
        self.interruption = interruption
        self._started = False
        if not self.ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address:
                kwargs["address"] = address
            else:
                kwargs["num_cpus"] = workers or device_count("cpu")
            try:
                self.ray.init(**kwargs)
            except Exception as exc:
                raise KernelgateError(
                    f"cannot start or reach Ray ({address or 'local'}): {exc}"
                ) from None
            self._started = True
        resources = self.ray.cluster_resources()
        per_task = "GPU" if device.startswith("cuda") else "CPU"
        self.workers = workers or max(1, int(resources.get(per_task, 1)))
        self.description = (
            f"ray ({address or 'local'}), {int(resources.get(per_task, 0))} {per_task}(s)"
        )
        self._remote = self.ray.remote(
            num_gpus=1 if per_task == "GPU" else 0, num_cpus=1, max_retries=0
        )(_judge_in_ray_task)

    def judge_all(
        self, records: Sequence[CorpusRecord], options: AuditOptions
    ) -> Iterator[tuple[CorpusRecord, dict[str, Any]]]:
        waiting = list(records)
        waiting.reverse()
        in_flight: dict[Any, CorpusRecord] = {}
        limit = 2 * self.workers  # enough to keep every slot busy, no more in memory
        stopping = self.interruption
        try:
            while waiting or in_flight:
                while waiting and len(in_flight) < limit:
                    record = waiting.pop()
                    ref = self._remote.remote(record.to_dict(), asdict(options))
                    in_flight[ref] = record
                # a timeout, so that a stop asked meanwhile is seen (the judges are not
                # this process's children: the signal handler cannot kill them)
                ready, _ = self.ray.wait(list(in_flight), num_returns=1, timeout=RAY_POLL_SECONDS)
                if stopping is not None and stopping.closed:
                    return
                for ref in ready:
                    record = in_flight.pop(ref)
                    try:
                        yield record, self.ray.get(ref)
                    except Exception as exc:  # the task's worker died, or Ray lost the node
                        yield record, error_row(record, f"ray task failed: {exc}", 0.0)
        finally:  # closed early (the audit failed, or was interrupted): stop every task
            self._cancel(list(in_flight))

    def _cancel(self, refs: list[Any]) -> None:
        """Stop running tasks: first a plain cancel, which raises KeyboardInterrupt in the
        task, where ``judge_isolated`` kills its judge's whole tree (the candidate's worker,
        in a session of its own, included); then, after a moment, a forced one, which ends
        the Ray worker process itself (its judge then dies with it, ``PR_SET_PDEATHSIG``)."""
        if not refs:
            return
        for ref in refs:
            with contextlib.suppress(Exception):
                self.ray.cancel(ref)
        with contextlib.suppress(Exception):
            self.ray.wait(refs, num_returns=len(refs), timeout=RAY_CANCEL_GRACE_SECONDS)
        for ref in refs:
            with contextlib.suppress(Exception):
                self.ray.cancel(ref, force=True)

    def close(self) -> None:
        if self._started:
            self.ray.shutdown()


def make_executor(
    kind: str,
    *,
    workers: int | None,
    device: str,
    ray_address: str | None,
    interruption: Interruption | None = None,
) -> Executor:
    if kind == "local":
        if ray_address:
            raise KernelgateError("--ray-address only applies with --executor ray")
        return LocalExecutor(workers, device, interruption)
    if kind == "ray":
        return RayExecutor(workers, device, ray_address, interruption)
    raise KernelgateError(f"unknown executor {kind!r}; use {' or '.join(EXECUTORS)}")


def side_by_side(*streams: Iterator[T]) -> Iterator[tuple[int, T]]:
    """Items of several executors' streams as each comes, tagged with its stream's index.

    Two pools at once (the records an earlier run deferred for memory, a few at a time,
    beside the rest) each wait on their own judges; one thread a stream drains them, and
    the caller alone touches the store, so nothing it holds is shared between threads. An
    exception in a stream reaches the caller when that stream's turn comes.

    Closed early, it waits (up to ``CLOSE_SECONDS``) for each stream to close itself, so
    that executors stop their work (Ray cancels its tasks) before the caller shuts them
    down; a stream waiting on a judge closes only once that judge ends, so the caller kills
    the judges first (``Interruption.close``).
    """
    finished = object()
    items: queue.Queue[tuple[int, Any]] = queue.Queue()
    abandoned = threading.Event()  # the caller stopped early: the streams close themselves

    def drain(index: int, stream: Iterator[T]) -> None:
        try:
            for item in stream:
                items.put((index, item))
                if abandoned.is_set():
                    break
        except BaseException as exc:  # handed to the caller below
            items.put((index, exc))
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
            items.put((index, finished))

    threads = [
        threading.Thread(
            target=drain, args=(index, stream), name=f"kernelgate-stream-{index}", daemon=True
        )
        for index, stream in enumerate(streams)
    ]
    for thread in threads:
        thread.start()
    running = len(streams)
    try:
        while running:
            index, item = items.get()
            if item is finished:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield index, item
    finally:
        abandoned.set()
        deadline = time.monotonic() + CLOSE_SECONDS
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
