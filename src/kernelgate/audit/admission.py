"""Memory-aware admission: a judge reserves its device memory before it touches the device.

Several judges share one GPU in an audit. Without admission, two records with
KernelBench-sized tensors (8 GiB float64 draws) start side by side, one runs the device out
of memory, and its record is judged again with fewer beside it: minutes lost per cycle, on
the records that cost the most. Here each judge estimates what it will hold from the
reference's shapes on the meta device (nothing allocated), and writes that estimate into a
ledger shared by the judges of one GPU before it runs the old check or any gate. It waits
while its estimate does not fit beside the reservations of the judges still alive; a judge
that is alone is always admitted, so a record larger than the budget is judged alone rather
than never.

The ledger is a JSON file (``{pid: bytes}``) under an ``fcntl`` lock, one per host and GPU,
in the audit's folder: judges of a local pool and of Ray workers on one node meet there. An
entry whose process has died counts for nothing, so a judge killed mid-record (its whole
tree SIGKILLed by the audit) frees its reservation without a word.

A record has two phases, and the judge reserves for each in turn: the KernelBench check
(``oldcheck.py``: the reference and the candidate at fp32 or less, no float64 oracle, and
often a long CPU-only build of the candidate's extension first) reserves
``estimate_old_check_bytes``, a fraction of what the gates take; the gates then reserve the
full estimate. Between the two the judge holds nothing (the check's child has exited), and
it keeps its first place in line, so a record already under way is not overtaken by records
that arrived while it was checked. Replayed on two H100 audits' rows
(``benchmarks/admission_sim.py``: the rows' own durations, 16 judges, an H200's budget), the
two phases cut the audit's wall time by 9-10% against one reservation held from the check
to the last gate: the check was 48-49% of judge time, held at the gates' size.

The estimate is a model, not a measurement (docs/audit.md, "Memory-aware admission"), fitted
to what judges measured on the device: per element the reference holds at its own sizes
(parameters, buffers, inputs and outputs) ``BYTES_PER_ELEMENT``, per element of the
largest set of tensors its ``forward`` keeps alive at once (intermediates and outputs,
``Footprint.work_elements``) ``BYTES_PER_WORK_ELEMENT``; plus a fixed part for the two
CUDA contexts and the judge's allocator (``CONTEXT_BYTES``); plus what the judge keeps on
the device from run to run (``held_device_bytes``: its recent cases' oracle results and
the copies of their inputs, each within its per-judge budget in ``gates/base.py``, and no
more than cases of the reference's sizes hold). Each row records its estimate beside the
memory the judge measured, for checking the model against the device.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernelgate.audit.processes import JudgeProcess
from kernelgate.sandbox.confine import pid_alive

GIB = 1 << 30
# Fitted to the CUDA-L1 h100 audit on an H100 (2026-12-05; benchmarks/admission_fit.py,
# docs/audit.md). The first model (40 bytes an element, inputs and outputs only) reserved
# less than the judge alone held on 18 of the 38 records over 2 GiB: an elementwise op over
# 269M elements (L1/T9) took 33 GiB (125 bytes an element: the float64 oracle's copies, the
# native and the candidate's results, the comparisons, the gates' probes), a network with
# 6.3M input and output elements (L2/T96) 21 GiB (its forward keeps 504M alive: 41 bytes
# each). Judges admitted beside them ran out of memory and were judged again, alone, at the
# end of the audit: the retry cycle that memory-aware admission is there to prevent.
BYTES_PER_ELEMENT = 120
BYTES_PER_WORK_ELEMENT = 40
# Held whatever the sizes: two CUDA contexts (judge, worker; about 0.5 GiB each) and what the
# judge's allocator reserved on the smallest CUDA-L1 records on the H200 (1.0-1.6 GiB)
CONTEXT_BYTES = 3 * GIB
UNKNOWN_ELEMENTS_BYTES = 8 * GIB  # a reference the meta device cannot size
# What one case of the reference keeps on the device between the oracle's runs, per
# element of the reference (``GateContext._cached``, ``oracle_inputs``): its float64
# result (8), the native run (4), a probe's or a CPU run's results (8, up to 8 more for the
# float64 CPU run or the index sources), its open signs (2), rounded up to 32; and the copy
# of its inputs, in their own dtypes (up to 8). Counting every element of the reference
# (weights too) as both an input and an output only over-counts.
HELD_BYTES_PER_ELEMENT = 32 + 8
# The KernelBench check, per element the reference holds (weights, inputs, outputs) and per
# element its forward keeps alive: the reference's and the candidate's copies at 4 bytes
# (fp32, the widest dtype the corpora use), each one's intermediates, and allclose's
# output-sized temporaries. Not fitted yet (rows record the check's estimate beside it).
OLD_CHECK_BYTES_PER_ELEMENT = 24
OLD_CHECK_BYTES_PER_WORK_ELEMENT = 8
BUDGET_SHARE = 0.85  # of the device's total memory: allocator rounding, fragmentation
POLL_SECONDS = 0.5
SIZING_SECONDS = 10.0  # for the meta-device run that sizes the reference
WAITING_MARKER = "admission-waiting"  # in a record's work folder while its judge waits


def estimate_device_bytes(elements: int | None, work_elements: int = 0) -> int:
    """Device memory a judge and its worker hold for a reference of ``elements`` tensor
    elements and ``work_elements`` alive at once in its ``forward``
    (``ReferenceProgram.footprint``; None: not measurable on the meta device): what a run
    takes, and what the judge keeps between runs (``held_device_bytes``)."""
    held = held_device_bytes(elements)
    if elements is None:
        return CONTEXT_BYTES + UNKNOWN_ELEMENTS_BYTES + held
    return (
        CONTEXT_BYTES + BYTES_PER_ELEMENT * elements + BYTES_PER_WORK_ELEMENT * work_elements + held
    )


def estimate_old_check_bytes(elements: int | None, work_elements: int = 0) -> int:
    """Device memory the KernelBench check of a reference of ``elements`` tensor elements
    (``work_elements`` alive at once in its ``forward``) holds: the two CUDA contexts' share
    and the reference's and candidate's fp32 runs, never more than the gates' estimate
    (which an unsizable reference gets whole)."""
    full = estimate_device_bytes(elements, work_elements)
    if elements is None:
        return full
    check = (
        CONTEXT_BYTES
        + OLD_CHECK_BYTES_PER_ELEMENT * elements
        + OLD_CHECK_BYTES_PER_WORK_ELEMENT * work_elements
    )
    return min(full, check)


def row_waited_seconds(row: dict[str, Any]) -> float:
    """Seconds an audit row's judge waited for device memory: before its check and before
    its gates (the row's ``admission.old_check_waited_s`` and ``waited_s``, written by
    ``judge.device_admission``); 0 in CPU mode or for rows without admission. Part of the
    row's ``seconds``, but the audit's scheduling, not the judge's work."""
    reserved = row.get("admission") or {}
    waits = (reserved.get("old_check_waited_s"), reserved.get("waited_s"))
    return round(sum(float(w) for w in waits if isinstance(w, int | float)), 3)


def held_device_bytes(elements: int | None) -> int:
    """What a judge keeps on the device from one oracle run to the next for a reference of
    ``elements`` tensor elements: its cases' results (``RESULTS_DEVICE_KEPT_BYTES``) and
    the copies of their inputs (``INPUTS_DEVICE_KEPT_BYTES``), at most those budgets
    together (all of them where the reference cannot be sized), and at most what the cases
    it keeps can hold at the reference's sizes: the ``RECENT_CASES`` latest and the one
    being evaluated at ``HELD_BYTES_PER_ELEMENT``, or ``RESULTS_KEPT_BYTES`` of older
    ones (``gates/base.py``). Without it the estimate left out up to 3 GiB a judge that
    the device path holds, and admitted judges beside each other that the device could
    not hold; bounded by the sizes, a small reference's judge reserves little more."""
    from kernelgate.gates import base  # read when asked: tests and audits may set them

    budgets = base.RESULTS_DEVICE_KEPT_BYTES + base.INPUTS_DEVICE_KEPT_BYTES
    if elements is None:
        return budgets
    cases = (base.RECENT_CASES + 1) * HELD_BYTES_PER_ELEMENT * elements
    return min(budgets, max(base.RESULTS_KEPT_BYTES, cases))


def reference_elements(reference: Path, seconds: float = SIZING_SECONDS) -> tuple[int | None, int]:
    """Tensor elements the reference holds at its own sizes and the most its ``forward``
    keeps alive at once, measured on the meta device (``(None, 0)`` when it cannot be built
    there, fails, or takes over ``seconds``: the meta device runs a recurrent network step
    by step). Its failures are ``verify``'s to report."""
    from kernelgate.formats.kernelbench import load_reference
    from kernelgate.inputs.footprint import Expired, time_limit

    try:
        with time_limit(seconds):
            footprint = load_reference(reference).footprint()
    except (Exception, Expired):
        return None, 0
    return (None, 0) if footprint is None else (footprint.elements, footprint.work_elements)


def device_budget() -> int | None:
    """What the judges of this GPU may reserve together: a share of its total memory
    (None without a CUDA device: no admission)."""
    import torch

    if not torch.cuda.is_available():
        return None
    _, total = torch.cuda.mem_get_info()
    return int(total * BUDGET_SHARE)


def ledger_path(folder: Path) -> Path:
    """The ledger of this host's GPU as the judge sees it (``CUDA_VISIBLE_DEVICES``)."""
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES", "").replace(",", "+") or "all"
    return folder / f"{socket.gethostname()}-gpu{gpu}.json"


def _alive(raw: Any, value: Callable[[Any], Any]) -> dict[int, Any]:
    """``raw``'s entries whose key is the pid of a live process (a killed judge's entry
    counts for nothing), values converted by ``value``."""
    if not isinstance(raw, dict):
        return {}
    return {
        int(pid): value(v)
        for pid, v in raw.items()
        if str(pid).isdigit() and isinstance(v, int | float) and pid_alive(int(pid))
    }


def device_free_bytes() -> int | None:
    """Memory free on this judge's GPU now, whoever holds the rest (the driver's count:
    other judges, their workers, anything else on the device); None without a CUDA device."""
    import torch

    if not torch.cuda.is_available():
        return None
    free, _ = torch.cuda.mem_get_info()
    return int(free)


@dataclass
class _Entries:
    """The ledger's content: reservations held (pid -> bytes) and judges waiting for one
    (pid -> when it first asked, wall-clock seconds: judges are separate processes)."""

    held: dict[int, int]
    waiting: dict[int, float]


@dataclass
class Ledger:
    """Reservations of device memory by the judges of one GPU (see the module docstring).

    Judges are admitted first come, first served: while one waits, no judge that asked
    after it is admitted, even one that would fit. Without the queue a large record never
    got in while small ones kept arriving (on an H100 two records waited the whole 18
    minutes of an audit beside a stream of small ones); with it the judges ahead drain
    until the first in line fits, or is alone, which is always admitted.

    ``free``, when given, reads the memory free on the device: a judge that is not alone is
    admitted only while its estimate also fits in what is free. The reservations are
    estimates; when the judges already running hold more than they reserved (a candidate's
    own allocations, a reference the model under-sizes), the device says so and newcomers
    wait for it instead of running it out of memory.
    """

    path: Path
    budget: int
    free: Callable[[], int | None] | None = None

    @contextlib.contextmanager
    def _locked(self) -> Iterator[_Entries]:
        """The reservations and waiting judges still alive, under the lock; written back on
        exit. A ledger of the first format (``{pid: bytes}``) reads as reservations."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path.with_suffix(".lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                try:
                    raw = json.loads(self.path.read_text())
                except (OSError, ValueError):
                    raw = {}
                raw = raw if isinstance(raw, dict) else {}
                if "held" not in raw and "waiting" not in raw:
                    raw = {"held": raw}  # the first format: reservations only
                entries = _Entries(_alive(raw.get("held"), int), _alive(raw.get("waiting"), float))
                yield entries
                temporary = self.path.with_suffix(".tmp")
                temporary.write_text(
                    json.dumps(
                        {
                            "held": {str(p): s for p, s in entries.held.items()},
                            "waiting": {str(p): t for p, t in entries.waiting.items()},
                        }
                    )
                )
                temporary.replace(self.path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def try_reserve(self, pid: int, size: int, asked_at: float | None = None) -> bool:
        """Reserve ``size`` bytes for ``pid`` if no judge that asked before it still waits,
        and they fit beside the others' and in what the device has free (or no one else
        holds any). False: ``pid`` waits in line (``release`` leaves it). ``asked_at``: when
        this judge first asked (wall-clock seconds), its place in line; by default now."""
        with self._locked() as entries:
            others = {p: s for p, s in entries.held.items() if p != pid}
            if pid not in entries.held:
                first = time.time() if asked_at is None else asked_at
                asked = entries.waiting.setdefault(pid, first)
                if any((t, p) < (asked, pid) for p, t in entries.waiting.items() if p != pid):
                    return False
            if others and sum(others.values()) + size > self.budget:
                return False
            if others and self.free is not None:
                free = self.free()
                if free is not None and size > free:
                    return False
            entries.held[pid] = size
            entries.waiting.pop(pid, None)
            return True

    def release(self, pid: int) -> None:
        """Give back ``pid``'s reservation, or its place in line."""
        with self._locked() as entries:
            entries.held.pop(pid, None)
            entries.waiting.pop(pid, None)

    def waiting(self) -> list[int]:
        """The judges waiting, first in line first (for reports and tests)."""
        with self._locked() as entries:
            return sorted(entries.waiting, key=lambda p: (entries.waiting[p], p))

    def reserved(self) -> dict[int, int]:
        """The live reservations (for reports and tests)."""
        with self._locked() as entries:
            return dict(entries.held)

    @contextlib.contextmanager
    def admitted(
        self,
        size: int,
        *,
        marker: Path | None = None,
        on_wait: Callable[[str], None] | None = None,
        poll: float = POLL_SECONDS,
        asked_at: float | None = None,
    ) -> Iterator[float]:
        """Wait until ``size`` bytes are reserved for this process, yield the seconds
        waited, release them on exit. ``marker`` exists while waiting: the audit does not
        count that time against the record's limit (``wait_for_judge``). ``asked_at``: the
        place in line of a judge that asked before (its record's first phase), else now."""
        pid, started, told = os.getpid(), time.monotonic(), False
        try:
            while not self.try_reserve(pid, size, asked_at):
                if not told:
                    if marker is not None:
                        marker.touch()
                    if on_wait is not None:
                        on_wait(
                            f"waiting for device memory: {size / GIB:.1f} GiB estimated, "
                            f"{sum(self.reserved().values()) / GIB:.1f} of "
                            f"{self.budget / GIB:.1f} GiB reserved by other judges"
                        )
                    told = True
                time.sleep(poll)
        except BaseException:
            # a place kept by a judge that no longer waits (a signal stopped it) would hold
            # back every judge behind it until its process is gone
            self.release(pid)
            raise
        finally:
            if marker is not None:
                marker.unlink(missing_ok=True)
        try:
            yield time.monotonic() - started
        finally:
            self.release(pid)


def wait_for_judge(process: JudgeProcess, limit: float, marker: Path) -> int:
    """``process.wait`` with ``limit`` seconds of judging: time during which ``marker``
    exists (the judge waiting for admission) is not counted. Raises TimeoutExpired."""
    deadline = time.monotonic() + limit
    while True:
        before = time.monotonic()
        try:
            return process.wait(timeout=min(1.0, max(0.05, deadline - before)))
        except subprocess.TimeoutExpired:
            if marker.exists():
                deadline += time.monotonic() - before
            elif time.monotonic() >= deadline:
                raise
