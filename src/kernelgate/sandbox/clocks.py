"""The clocks a candidate reads, and the timing-dependent choices it makes (worker side).

A candidate that times two paths once and keeps the faster (half precision "when it is
faster", a block size, a Triton autotune config) is otherwise judged only on the path the
clocks chose that day. The worker therefore installs these clocks before the candidate is
imported, in one of these modes (the ``clock_mode`` of the load header):

* ``real``: real time; every read made by candidate code is recorded as a choice point;
* ``faster`` / ``slower``: every measurement looks faster (slower) than the one before it;
* ``random:<seed>``: measurements of seeded random length;
* ``config:<i>``: real time, and every ``@triton.autotune`` kernel uses its config i mod n.

A lie is a seeded function of its ordinal only (the k-th lie of the instance), so a verdict
replays. The fake clock stays monotonic and advances 10 us to 110 ms a read (``step``): code
such as ``while time.time() - t0 < 0.1`` still ends. Only reads made by candidate code (or by a
timing helper such as ``timeit`` that candidate code called) are lied to and recorded;
torch, Triton's compiler and every other library keep real time. The explicit benchmark
hooks (``triton.testing.do_bench``, ``torch.cuda.Event.elapsed_time``, the autotuner) lie
to every caller in the adversarial modes.

The autotuner's choice is set here, not timed: faster -> its last config (the one a clock
that makes later runs look faster picks), slower -> its first, random -> a seeded one,
config:<i> -> config i mod n. Triton's ``Autotuner.prune_configs`` is wrapped to return
only that config, so no config is benchmarked at all, which is also what lets a multi-config
autotune run under the interpreter (its benchmarker needs a GPU); in ``real`` mode under
the interpreter the first config is used for the same reason.

What the judge gets back (``report``) is raw data from a process running hostile code:
evidence of the choices seen, never proof that there were no others.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import sys
import threading
import time
import timeit
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kernelgate.serde import Serializable

# Bound now, before candidate code can patch them.
_getframe = sys._getframe
_real_perf_counter = time.perf_counter

AS_PER_SECOND = 10**18  # the fake clock counts attoseconds, so every step is an exact integer
AS_PER_MS = 10**15
FLOOR = 10**13  # the fake clock's steps lie between 10 us ...
CEILING = 10**17  # ... and 100 ms a read
KNEE, POWER = 4, 3  # steps shrink (grow) as ((k + KNEE) / KNEE) ** POWER: see ``step``

CLOCK_FUNCTIONS = (
    "perf_counter",
    "perf_counter_ns",
    "monotonic",
    "monotonic_ns",
    "time",
    "time_ns",
    "process_time",
    "process_time_ns",
    "thread_time",
    "thread_time_ns",
    "clock_gettime",
    "clock_gettime_ns",
)
# Modules whose clock reads count as their caller's when candidate code called them: a
# candidate timing its paths with ``timeit`` or torch's benchmark utilities still chooses.
TIMING_HELPERS = ("timeit", "torch.utils.benchmark", "triton.testing")
KINDS = ("clock", "do_bench", "event", "autotune")
MAX_POINTS = 256  # distinct choice points kept; a candidate cannot grow the reply past this


@dataclass(frozen=True)
class ClockMode:
    """A parsed ``clock_mode``: ``real``, ``faster``, ``slower``, ``random:<seed>`` or
    ``config:<i>``."""

    kind: str
    number: int = 0

    @classmethod
    def parse(cls, text: str) -> ClockMode:
        kind, colon, argument = str(text).partition(":")
        if kind in ("real", "faster", "slower") and not colon:
            return cls(kind)
        if kind in ("random", "config") and argument.isdigit():
            return cls(kind, int(argument))
        raise ValueError(
            f"unknown clock mode {text!r}: real, faster, slower, random:<seed> or config:<i>"
        )

    def __str__(self) -> str:
        return f"{self.kind}:{self.number}" if self.kind in ("random", "config") else self.kind

    @property
    def lies(self) -> bool:
        """Whether measurements are made up (the adversarial modes)."""
        return self.kind in ("faster", "slower", "random")


def _uniform(seed: int, *key: object) -> int:
    """A seeded 64-bit draw for ``key``: the same on every run, whatever came before it."""
    text = "/".join(str(k) for k in (seed, *key)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def step(mode: ClockMode, k: int) -> int:
    """How far (attoseconds) the k-th lie (k >= 1) moves the fake clock.

    ``faster`` shrinks from CEILING toward FLOOR and ``slower`` grows from FLOOR toward
    CEILING, both as a power of the lie's ordinal: in the first lies, where a candidate
    times its paths, the interval after next is at most 2/3 (at least 3/2) as long, and
    the third a third (three times), so a candidate that wants a margin ("fp16 only if
    20% faster") still goes the mode's way.
    Both stay strictly ordered for tens of thousands of lies and never leave
    [FLOOR, CEILING], so the clock keeps a plausible pace: a loop until 0.1 s have passed
    ends, and a 10 s timeout needs a hundred reads or more. ``random`` is log-uniform over
    the same range, so a random pair of intervals differs by a large factor too.
    """
    grown = (k + KNEE) ** POWER  # KNEE ** POWER * (the growth since the first lie)
    if mode.kind == "faster":
        return FLOOR + CEILING * KNEE**POWER // grown
    if mode.kind == "slower":
        return FLOOR * CEILING * grown // (CEILING * KNEE**POWER + FLOOR * grown)
    if mode.kind == "random":
        fraction = _uniform(mode.number, "clock", k) / 2**64
        return round(FLOOR * (CEILING / FLOOR) ** fraction)
    raise ValueError(f"clock mode {mode} tells no lies")


@dataclass
class ChoicePoint(Serializable):
    """One place where the candidate's behaviour may depend on a measurement."""

    kind: str  # "clock" | "do_bench" | "event" | "autotune"
    what: str  # the clock or benchmark function read, or the autotuned kernel's name
    where: str  # candidate file:line that read it or launched the kernel ("" if none)
    count: int  # reads (launches that tuned, for autotune) seen at this point
    faked: bool = False  # whether the values were the mode's (a lie, a forced config)
    configs: int | None = None  # autotune: configs left after pruning, the ones it picks from
    chosen: int | None = None  # autotune: index (among those) of the config this instance used

    def describe(self) -> str:
        site = f" at {self.where}" if self.where else ""
        if self.kind == "autotune":
            return f"autotune {self.what}{site}: config {self.chosen} of {self.configs}"
        return f"{self.kind} {self.what}{site} x{self.count}"


def parse_choice_points(raw: Any) -> list[ChoicePoint]:
    """The choice points of a worker's reply, checked field by field (judge side).

    The worker runs hostile code: anything malformed is dropped, strings are cut short and
    at most MAX_POINTS are kept, so a reply can neither crash the judge nor flood it.
    """
    points: list[ChoicePoint] = []
    for item in raw if isinstance(raw, list) else []:
        if len(points) >= MAX_POINTS:
            break
        if not isinstance(item, dict) or item.get("kind") not in KINDS:
            continue
        count, configs, chosen = item.get("count"), item.get("configs"), item.get("chosen")
        if not _is_int(count) or count < 1:
            continue
        if item["kind"] == "autotune":
            if not (_is_int(configs) and configs >= 1 and _is_int(chosen)):
                continue
            if not 0 <= chosen < configs:
                continue
        else:
            configs = chosen = None
        points.append(
            ChoicePoint(
                kind=item["kind"],
                what=str(item.get("what", ""))[:200],
                where=str(item.get("where", ""))[:500],
                count=count,
                faked=item.get("faked") is True,
                configs=configs,
                chosen=chosen,
            )
        )
    return points


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class Clocks:
    """Installs the fake clocks and benchmark hooks and records what candidate code reads."""

    def __init__(
        self, mode: ClockMode, candidate: str, module: str, *, device_timing: bool
    ) -> None:
        self.mode = mode
        self.candidate = os.path.abspath(candidate)
        self.candidate_dir = os.path.dirname(self.candidate)
        self.module = module  # the name the candidate is imported under
        # Whether real device timing exists (a GPU, no interpreter): without it a real
        # ``do_bench`` times one run on the host, and a real autotune takes its first config.
        self.device_timing = device_timing
        self.notes: list[str] = []
        self._lock = threading.Lock()
        self._local = threading.local()  # ``benching``: inside a do_bench wrapper
        self._lies = 0
        self._elapsed = 0  # attoseconds the lies have added so far
        self._bases: dict[Any, int] = {}  # per clock: its reading at its first lie, minus _elapsed
        self._points: dict[tuple[Any, ...], ChoicePoint] = {}
        self._dropped = 0
        self._tunings = 0  # autotunings so far: the random mode's pick is seeded by it
        # autotuner id -> (its pruned configs, the forced index or None), during its ``run``
        self._pending: dict[int, tuple[list[Any], int | None]] = {}
        self._is_candidate_code: dict[Any, bool] = {}

    # -- installing ---------------------------------------------------------------------
    def install(self) -> None:
        """Replace the clocks and benchmark hooks; a missing one is a note, never an error."""
        for name in CLOCK_FUNCTIONS:
            real = getattr(time, name, None)
            if real is not None:
                setattr(time, name, self._clock(name, real))
        # ``timeit.Timer`` took the real ``perf_counter`` as its default timer at import.
        timeit.default_timer = time.perf_counter
        defaults = timeit.Timer.__init__.__defaults__ or ()
        timeit.Timer.__init__.__defaults__ = tuple(
            time.perf_counter if d is _real_perf_counter else d for d in defaults
        )
        self._install_event()
        self._install_triton()

    def _clock(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        clocks, in_ns = self, name.endswith("_ns")

        def read(*args: Any) -> Any:
            value = real(*args)
            where = clocks._reader(_getframe(1))
            if where is None:
                return value
            clocks._record("clock", name, where, faked=clocks.mode.lies)
            if not clocks.mode.lies:
                return value
            now = value * 10**9 if in_ns else round(value * AS_PER_SECOND)
            with clocks._lock:
                elapsed = clocks._advance()
                base = clocks._bases.setdefault((name, *args), now - elapsed)
            fake = base + elapsed
            return fake // 10**9 if in_ns else fake / AS_PER_SECOND

        read.__name__ = read.__qualname__ = name
        read.__doc__ = real.__doc__
        return read

    def _install_event(self) -> None:
        try:
            import torch

            event = torch.cuda.Event
            real = event.elapsed_time
        except Exception as exc:  # a torch without CUDA events
            self.notes.append(f"Event.elapsed_time not replaced: {type(exc).__name__}: {exc}")
            return
        clocks = self

        def elapsed_time(self: Any, end_event: Any) -> float:
            value = real(self, end_event)  # errors (events not recorded) stay what they were
            if getattr(clocks._local, "benching", False):
                return value  # inside do_bench: that read is the do_bench choice point
            clocks._record(
                "event", "Event.elapsed_time", clocks._site(_getframe(1)), clocks.mode.lies
            )
            if not clocks.mode.lies:
                return value
            with clocks._lock:
                return clocks._lie_ms()

        event.elapsed_time = elapsed_time

    def _install_triton(self) -> None:
        try:
            import triton.testing as testing
        except Exception as exc:
            self.notes.append(f"Triton hooks not installed: {type(exc).__name__}: {exc}")
            return
        for name in ("do_bench", "do_bench_cudagraph"):
            real = getattr(testing, name, None)
            if real is not None:
                setattr(testing, name, self._benchmark(name, real))
        try:
            from triton.runtime.autotuner import Autotuner
        except Exception as exc:
            self.notes.append(f"autotuner not hooked: {type(exc).__name__}: {exc}")
            return
        self._install_autotuner(Autotuner)

    def _benchmark(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        """A ``do_bench``: real where the mode tells the truth and a device can time, one
        host-timed run where none can, a lie after one run in the adversarial modes."""
        clocks, signature = self, inspect.signature(real)

        def bench(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            fn = bound.arguments.get("fn", args[0] if args else None)
            quantiles = bound.arguments.get("quantiles")
            return_mode = bound.arguments.get("return_mode", "mean")
            clocks._record("do_bench", name, clocks._site(_getframe(1)), clocks.mode.lies)
            if not clocks.mode.lies and clocks.device_timing:
                clocks._local.benching = True
                try:
                    return real(*args, **kwargs)
                finally:
                    clocks._local.benching = False
            started = _real_perf_counter()
            fn()  # the work happens once, as it would (compiles, side effects)
            if clocks.mode.lies:
                with clocks._lock:
                    ms = clocks._lie_ms()
            else:
                ms = (_real_perf_counter() - started) * 1e3
            if quantiles is not None:
                return [ms for _ in quantiles]
            return [ms] if return_mode == "all" else ms

        bench.__name__ = bench.__qualname__ = name
        bench.__doc__ = real.__doc__
        return bench

    def _install_autotuner(self, autotuner: type) -> None:
        """Wrap ``prune_configs`` (the choice), ``_bench`` and ``run`` (the record).

        Triton 3.x (read in 3.9's source and a current one) calls ``prune_configs(kwargs)``
        once per new tuning key and benchmarks what it returns; returning one config makes
        that config the choice (3.9 then skips benchmarking; ``_bench`` answers without
        running for a version that would still time it). The chosen index is among the
        pruned configs: the ones the autotuner could pick from. A tuning left with one
        config chose nothing and is not recorded.
        """
        prune = getattr(autotuner, "prune_configs", None)
        bench = getattr(autotuner, "_bench", None)
        run = getattr(autotuner, "run", None)
        if prune is None or run is None:
            self.notes.append("autotuner not hooked: no prune_configs/run (unknown Triton)")
            return
        clocks = self

        def prune_configs(tuner: Any, *args: Any, **kwargs: Any) -> list[Any]:
            configs = list(prune(tuner, *args, **kwargs))
            with clocks._lock:
                forced = clocks._pick(len(configs))
            clocks._pending[id(tuner)] = (configs, forced)
            return configs if forced is None else [configs[forced]]

        def run_(tuner: Any, *args: Any, **kwargs: Any) -> Any:
            clocks._pending.pop(id(tuner), None)
            result = run(tuner, *args, **kwargs)
            tuned = clocks._pending.pop(id(tuner), None)
            if tuned is not None:
                clocks._record_tuning(tuner, tuned, _getframe(1))
            return result

        autotuner.prune_configs = prune_configs
        autotuner.run = run_
        if bench is not None:

            def _bench(tuner: Any, *args: Any, **kwargs: Any) -> Any:
                forced = clocks._pending.get(id(tuner), ([], None))[1]
                if forced is not None:
                    return [0.0, 0.0, 0.0]  # the choice is made; nothing needs timing
                return bench(tuner, *args, **kwargs)

            autotuner._bench = _bench

    # -- choosing -----------------------------------------------------------------------
    def _advance(self) -> int:
        """The next lie: the fake elapsed time after it (call with the lock held)."""
        self._lies += 1
        self._elapsed += step(self.mode, self._lies)
        return self._elapsed

    def _lie_ms(self) -> float:
        """The next lie as a measurement in milliseconds (call with the lock held)."""
        before = self._elapsed
        return (self._advance() - before) / AS_PER_MS

    def _pick(self, n: int) -> int | None:
        """Which of ``n`` configs an autotuning takes (None: Triton's own timing decides)."""
        self._tunings += 1
        if n <= 1:
            return 0 if n == 1 else None
        kind = self.mode.kind
        if kind == "faster":
            return n - 1  # timed in order, the last one looks fastest
        if kind == "slower":
            return 0
        if kind == "random":
            return _uniform(self.mode.number, "autotune", self._tunings) % n
        if kind == "config":
            return self.mode.number % n
        return None if self.device_timing else 0  # real time, but nothing here can time it

    # -- recording ----------------------------------------------------------------------
    def _candidate(self, frame: Any) -> bool:
        code = frame.f_code
        known = self._is_candidate_code.get(code)
        if known is None:
            path = code.co_filename
            known = frame.f_globals.get("__name__") == self.module or (
                not path.startswith("<")
                and os.path.dirname(os.path.abspath(path)) == self.candidate_dir
            )
            self._is_candidate_code[code] = known
        return known

    def _reader(self, frame: Any) -> str | None:
        """``file:line`` of the candidate code behind a clock read, where the read is the
        candidate's own (directly, or through timing helpers only); None for library reads."""
        while frame is not None:
            if self._candidate(frame):
                return f"{frame.f_code.co_filename}:{frame.f_lineno}"
            name = frame.f_globals.get("__name__")
            if not (isinstance(name, str) and name.startswith(TIMING_HELPERS)):
                return None
            frame = frame.f_back
        return None

    def _site(self, frame: Any) -> str:
        """``file:line`` of the innermost candidate frame on the stack ("" if none)."""
        while frame is not None:
            if self._candidate(frame):
                return f"{frame.f_code.co_filename}:{frame.f_lineno}"
            frame = frame.f_back
        return ""

    def _record(
        self,
        kind: str,
        what: str,
        where: str,
        faked: bool,
        configs: int | None = None,
        chosen: int | None = None,
    ) -> None:
        key = (kind, what, where, configs, chosen)
        with self._lock:
            point = self._points.get(key)
            if point is not None:
                point.count += 1
            elif len(self._points) < MAX_POINTS:
                self._points[key] = ChoicePoint(kind, what, where, 1, faked, configs, chosen)
            else:
                self._dropped += 1

    def _record_tuning(self, tuner: Any, tuned: tuple[list[Any], int | None], caller: Any) -> None:
        configs, forced = tuned
        n, chosen = len(configs), forced
        if n <= 1:
            return  # pruning left one config: no choice was made
        if chosen is None:  # Triton timed them: find the winner among the pruned configs
            best = getattr(tuner, "best_config", None)
            chosen = next((i for i, c in enumerate(configs) if c is best), None)
            if chosen is None and best is not None:
                chosen = next((i for i, c in enumerate(configs) if c == best), 0)
            chosen = chosen or 0
        fn = getattr(tuner, "base_fn", None) or getattr(tuner, "fn", None)
        name = str(getattr(fn, "__name__", "?"))
        where = self._site(caller)
        if not where and fn is not None and hasattr(fn, "__code__"):
            where = f"{fn.__code__.co_filename}:{fn.__code__.co_firstlineno}"
        self._record("autotune", name, where, forced is not None, n, min(chosen, n - 1))

    def report(self) -> dict[str, Any]:
        """What the judge asks for (the ``choices`` op): the choice points seen so far."""
        with self._lock:
            points = [p.to_dict() for p in self._points.values()]
        notes = list(self.notes)
        if self._dropped:
            notes.append(f"{self._dropped} reads at further points not recorded")
        return {"mode": str(self.mode), "choice_points": points, "notes": notes}
