"""The compile phase's own budget: building is not a hang.

A candidate that builds a ``load_inline`` extension or compiles a Triton kernel does it at
import or on its first forward, and nvcc takes tens of seconds where the kernel itself takes
milliseconds. Held to the call deadline (``--timeout``) such a build read as a hang, and
every honest record that built on its first call was rejected by RES-01.

So the judge keeps two clocks per exchange with the worker (``CallClock``):

- the call's own allowance, ``timeout`` seconds of time spent not building;
- the verification's compile budget (``CompileBudget``, ``--compile-timeout``), shared by
  all workers of one verification, spent by time spent building.

The judge measures the wall time itself. What it takes from the worker are build events
(``{"event": "build", "phase": "start" | "end"}`` frames, sent by the hooks of
``sandbox/builds.py`` around torch's extension builds and Triton's compiles): they say which
clock runs, nothing else. They are the candidate's to forge, and forging gains nothing: a
"build" that never ends is charged to the compile budget and killed when it is spent, so
every exchange ends within ``timeout`` plus what is left of the budget. A fresh instance's
first call may also build what no hook sees (torch.compile, a cupy kernel, nvcc started by
hand): its time beyond ``timeout`` overflows into the compile budget.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from kernelgate.sandbox.builds import ERROR_CHARS  # a failed build's first error, cut to this

DEFAULT_COMPILE_TIMEOUT = 900.0
BUILD_EVENT = "build"
MAX_BUILDS_KEPT = 32  # builds listed per exchange in the evidence (the seconds count all)
WHAT_CHARS = 200  # a build's name as the worker gave it, cut to this


@dataclass
class CompileBudget:
    """Seconds of building one verification may spend, across all its workers."""

    seconds: float = DEFAULT_COMPILE_TIMEOUT
    spent: float = 0.0

    @property
    def left(self) -> float:
        return max(0.0, self.seconds - self.spent)

    def spend(self, seconds: float) -> float:
        """Charge ``seconds``; returns the part the budget still had."""
        charged = min(max(0.0, seconds), self.left)
        self.spent += max(0.0, seconds)
        return charged


@dataclass
class CallClock:
    """The deadline of one exchange with the worker, as the judge measures it.

    ``timeout``: seconds the exchange may spend not building. ``overflow``: a fresh
    instance's first call (or its load), whose time beyond ``timeout`` is charged to the
    compile budget, building or not.
    """

    timeout: float
    budget: CompileBudget
    overflow: bool = False
    started: float = field(default_factory=time.monotonic)
    compile_seconds: float = 0.0  # charged to the budget in this exchange
    builds: list[dict[str, Any]] = field(default_factory=list)
    failed_builds: list[str] = field(default_factory=list)  # what, of each build that failed
    _mark: float = 0.0
    _base_left: float = 0.0
    _open: list[tuple[str, float]] = field(default_factory=list)  # builds started, not ended

    def __post_init__(self) -> None:
        self._mark = self.started
        self._base_left = self.timeout

    @property
    def building(self) -> bool:
        return bool(self._open)

    def charge(self, now: float | None = None) -> None:
        """Charge the time since the last mark to whichever clock ran."""
        now = time.monotonic() if now is None else now
        elapsed, self._mark = max(0.0, now - self._mark), now
        if self.building:
            self.compile_seconds += self.budget.spend(elapsed)
            return
        base = min(elapsed, self._base_left)
        self._base_left -= base
        if self.overflow and elapsed > base:
            self.compile_seconds += self.budget.spend(elapsed - base)

    def deadline(self) -> float:
        """When the worker must have answered, if nothing changes before (call after
        ``charge``): the budget's rest while building, else the call's own rest (plus the
        budget's, for an exchange that overflows into it)."""
        if self.building:
            return self._mark + self.budget.left
        return self._mark + self._base_left + (self.budget.left if self.overflow else 0.0)

    def event(self, header: dict[str, Any], now: float | None = None) -> None:
        """A build event from the worker: ``phase`` "start" or "end" (with ``ok``)."""
        self.charge(now)
        what = str(header.get("what", "?"))[:WHAT_CHARS]
        if header.get("phase") == "start":
            self._open.append((what, self._mark))
        elif header.get("phase") == "end" and self._open:
            name, since = self._open.pop()
            ok = header.get("ok") is True
            if not ok:
                self.failed_builds.append(name)
            if len(self.builds) < MAX_BUILDS_KEPT:
                seconds = round(self._mark - since, 3)
                build: dict[str, Any] = {"what": name, "seconds": seconds, "ok": ok}
                if not ok and header.get("error"):
                    build["error"] = str(header["error"])[:ERROR_CHARS]
                self.builds.append(build)

    def expiry(self) -> tuple[str, str]:
        """Why the deadline passed: ("build-timeout", ...) when a build ran the budget out
        (a load-stage result), else ("timeout", ...) (a hang: RES-01)."""
        self.charge()
        spent = f"{self.budget.spent:.1f} s of the {self.budget.seconds:g} s compile budget"
        if self.building:
            what = self._open[-1][0]
            return (
                "build-timeout",
                f"the build of {what} ran past the compile budget ({spent} spent); worker killed",
            )
        if self.overflow:
            return (
                "timeout",
                f"no answer within {self.timeout:g} s of call time plus the compile budget "
                f"({spent} spent; hang or runaway); worker killed",
            )
        return "timeout", f"no answer within {self.timeout:g} s (hang or runaway); worker killed"

    def record(self, op: str) -> dict[str, Any] | None:
        """What this exchange spent on building, for the evidence (None: nothing)."""
        self.charge()
        if self.compile_seconds <= 0 and not self.builds:
            return None
        return {
            "op": op,
            "compile_seconds": round(self.compile_seconds, 3),
            "builds": list(self.builds),
            "overflow": self.overflow,
        }
