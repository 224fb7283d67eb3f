"""Stopping an audit on SIGINT or SIGTERM: kill every judge, keep every stored row, exit.

Python's default SIGINT raises ``KeyboardInterrupt`` in the main thread only. The judges run
in child processes, waited on by the executor's threads, so the main thread unwound while
those threads went on waiting (and took the next records as judges died), and the
interpreter joined them at exit: an audit ignored Ctrl-C for as long as its slowest judge
took, up to the record limit. SIGTERM had no handler: the audit died at once, and the
candidates' workers, in sessions of their own, outlived it.

So an audit's judging is stopped from one place. Executors start every judge process through
``Interruption.launch``, which refuses once a stop is asked and otherwise remembers the
judge; the signal handler kills every remembered judge with its whole process tree, so each
waiting thread returns at once, and the runner commits nothing that arrives after the
signal: a record being judged when it came has no row, and ``--resume`` judges it again
(from the gates its journal holds). The handler itself never raises while judges run, so a
stop never lands in the middle of the runner's bookkeeping; before judging starts there is
nothing to kill and it raises ``AuditInterrupted`` at once.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType

from kernelgate.audit.processes import JudgeProcess, kill_tree

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# A stop ends within this many seconds of the first signal: the judges' threads return,
# then the report is written in what is left of it, or is left for ``audit-report``.
STOP_SECONDS = 6.0
JUDGES_GONE_SECONDS = 3.0  # at most this long for the killed judges' threads to return
POLL_SECONDS = 0.05


class AuditInterrupted(BaseException):
    """The audit stopped on a signal: what was kept, what is left, whether the report is
    written (counts None: the signal came before judging began).

    A ``BaseException``, as ``KeyboardInterrupt`` is: raised by the handler before judging
    begins, it may land anywhere, and no ``except Exception`` on its way (a corpus reader
    taking it for a malformed record, say) must swallow it.
    """

    def __init__(
        self,
        signum: int,
        *,
        rows_kept: int | None = None,
        records_left: int | None = None,
        report_written: bool = False,
    ) -> None:
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum
        self.rows_kept = rows_kept
        self.records_left = records_left
        self.report_written = report_written

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number."""
        return 128 + self.signum


class Interruption:
    """One audit's stop: the judge processes running now, and the signal that stops them.

    Judges are started and remembered under one lock, so a judge is either refused (the
    stop came first) or remembered before the stop's kill looks (it is killed). The lock is
    reentrant because the signal handler runs in the main thread, between any two of its
    bytecodes, and may find the lock held there.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._judges: set[int] = set()
        self.signum: int | None = None
        self.signals = 0  # how many stop signals came (a second one hurries the report)
        self.since: float | None = None  # time.monotonic() of the first
        self.closed = False  # no judge starts any more (a stop, or the audit failed)
        self.judging = False  # judges may run: the handler kills them instead of raising

    @property
    def requested(self) -> bool:
        return self.signum is not None

    @property
    def hurried(self) -> bool:
        """A second signal came: stop without waiting for anything that may be skipped."""
        return self.signals > 1

    def launch(self, start: Callable[[], JudgeProcess]) -> JudgeProcess | None:
        """Start a judge with ``start`` and remember it; None once the audit is stopping."""
        with self._lock:
            if self.closed:
                return None
            process = start()
            self._judges.add(process.pid)
            return process

    def finished(self, pid: int) -> None:
        """The judge ``pid`` has been waited for (its thread is about to return)."""
        with self._lock:
            self._judges.discard(pid)

    def running(self) -> int:
        with self._lock:
            return len(self._judges)

    def stop(self, signum: int) -> None:
        """On a signal: refuse further judges, kill every running one with its whole tree."""
        with self._lock:
            if self.signum is None:
                self.signum, self.since = signum, time.monotonic()
            self.signals += 1
        self.close()

    def close(self) -> None:
        """Refuse further judges and kill every running one with its whole process tree
        (a stop, or an audit that fails: its judges must not outlive it either)."""
        with self._lock:
            self.closed = True
            judges = sorted(self._judges)
        for pid in judges:
            kill_tree(pid)

    def check(self) -> None:
        """Raise ``AuditInterrupted`` if a stop was asked (the runner's checkpoints)."""
        if self.signum is not None:
            raise AuditInterrupted(self.signum)

    def seconds_left(self) -> float:
        """Of the stop's time, what is left (all of it before any signal)."""
        if self.since is None:
            return STOP_SECONDS
        return STOP_SECONDS - (time.monotonic() - self.since)

    def wait_for_judges(self, limit: float = JUDGES_GONE_SECONDS) -> bool:
        """Wait until every killed judge has been waited for; kill again what is left (a
        judge started between two looks). True when none is left."""
        deadline = time.monotonic() + limit
        while self.running() and time.monotonic() < deadline:
            with self._lock:
                judges = sorted(self._judges)
            for pid in judges:
                kill_tree(pid)
            time.sleep(POLL_SECONDS)
        return not self.running()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        first = not self.requested
        self.stop(signum)
        if first and not self.judging:
            raise AuditInterrupted(signum)  # nothing runs yet: unwind at once

    @contextlib.contextmanager
    def handling_signals(self) -> Iterator[Interruption]:
        """SIGINT and SIGTERM stop this audit while the block runs (main thread only:
        elsewhere Python cannot install handlers, and the caller handles its signals)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        previous = {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}
        self.claim_signals()
        try:
            yield self
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def claim_signals(self) -> None:
        """(Re)install this audit's handlers: ``ray.init`` installs a SIGTERM handler of its
        own (``sys.exit``), which would end the audit without stopping its judges."""
        if threading.current_thread() is threading.main_thread():
            for signum in STOP_SIGNALS:
                if signal.getsignal(signum) != self._handle:
                    signal.signal(signum, self._handle)

    def begin_judging(self) -> None:
        """From now on judges may run: a signal kills them, and the runner stops at its
        next checkpoint (before, a signal raises at once)."""
        self.judging = True
