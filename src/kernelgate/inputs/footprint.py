"""Which held-out sizes CMP-03 can afford, measured on the meta device before anything runs.

The input cap (``inputs.shapes``) bounds what a size puts into the inputs, and it alone
bounds the sizes that shape an input. A size that shapes no input tensor (``kernel_size``,
``out_features``, ``num_layers``) grows the weights, the outputs and the work instead, and
the float64 oracle pays for all three: on the H200 a
confirmation at ``kernel_size=4096`` in a batch-128 transposed convolution thrashed the host,
and ``kernel_size=33`` in a 3-D one held only 4x the reference's elements but needed 1300x
its flops. So a size is admitted only while the reference's ``Footprint`` there (elements of
parameters, buffers, inputs and outputs, and ``FlopCounterMode``'s flops) stays within
``FOOTPRINT_FACTOR`` times that of the reference case (or of the cap, where larger).

Measuring is not free either: the meta device runs a recurrent network step by step in
Python (12 s for a 6-layer GRU over 512 steps), so sizes are measured lazily, only those a
gate is about to use, within ``FOOTPRINT_SECONDS`` per gate run. Above the reference, cost
is taken to grow with the size: once a size is refused, larger ones are refused unmeasured,
and once the time is spent (or where the model cannot be built on the meta device), only
sizes up to the reference's are admitted.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

from kernelgate.formats.kernelbench import Footprint, ReferenceProgram

FOOTPRINT_FACTOR = 4  # a size holds and computes at most this many times the reference case
FLOPS_PER_CAPPED_ELEMENT = 1024  # the flop limit's floor, per element of the cap
FOOTPRINT_SECONDS = 30.0  # meta-device measuring per gate run
IMPORT_GRACE_SECONDS = 0.05  # a limit that falls inside an import is retried this much later
REARM_SECONDS = 0.05  # an expiry that was swallowed is raised again this much later
TRANSITION_GRACE_SECONDS = 0.01  # an expiry that falls inside __enter__/__exit__ waits this much
TRANSITION_WAIT_SECONDS = 1.0  # ... at most this long past the limit in all, then it is raised


class Expired(BaseException):
    """Raised into a measurement that ran out of time; a BaseException, so that the
    reference's own ``except Exception`` (and ``footprint``'s) cannot swallow it."""


_EXPIRED = object()  # what ``FootprintLimit._measure`` returns for a measurement cut off


def _importing(frame: Any) -> bool:
    """Whether ``frame`` runs inside an import (torch imports modules lazily, on first use)."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _in_transition(frame: Any, owner: Any) -> bool:
    """Whether ``frame`` runs inside a context manager's ``__enter__`` or ``__exit__`` below
    ``owner`` (the frame of the ``with time_limit(...)`` statement). An exception raised
    there skips the rest of that method: ``torch.no_grad().__exit__`` cut off leaves grad
    mode off for the whole process, an ``__enter__`` cut off after its change is never
    undone, and this limit's own ``finally`` cut off leaves the timer armed."""
    while frame is not None and frame is not owner:
        if frame.f_code.co_name in ("__enter__", "__exit__"):
            return True
        frame = frame.f_back
    return False


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise ``Expired`` in the block after ``seconds``: in the main thread only, where
    signals arrive; elsewhere the block runs without a limit. Nests: inside another limit
    the block gets the smaller of the two, and the outer limit runs on afterwards. Never
    inside an import: the limit waits for it to finish (a module whose import was cut off
    stays half-initialised in ``sys.modules``, and every later use of it fails). Nor inside
    a context manager's ``__enter__`` or ``__exit__``: the limit waits for it to return (at
    most ``TRANSITION_WAIT_SECONDS``), so that state those methods set and restore, grad
    mode above all, is never left half changed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    owner = sys._getframe(2)  # this generator <- contextlib's __enter__ <- the with statement

    ended = False

    def expire(signum: int, frame: Any) -> None:
        if ended:  # delivered late, after the block ended: arm nothing, raise nothing
            return
        if _importing(frame):  # an import cut off leaves its module half made, for good
            signal.setitimer(signal.ITIMER_REAL, IMPORT_GRACE_SECONDS)
            return
        overdue = time.monotonic() - started - limit
        if overdue < TRANSITION_WAIT_SECONDS and _in_transition(frame, owner):
            signal.setitimer(signal.ITIMER_REAL, TRANSITION_GRACE_SECONDS)
            return
        # Raised inside a garbage-collector callback or a ``__del__`` (hypothesis installs
        # one), the exception is printed and dropped: until the block ends, raise it again.
        signal.setitimer(signal.ITIMER_REAL, REARM_SECONDS)
        raise Expired

    outer_left = signal.getitimer(signal.ITIMER_REAL)[0]  # 0.0: no limit outside
    started = time.monotonic()
    own = max(seconds, 1e-3)
    limit = min(own, outer_left) if outer_left > 0 else own
    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        yield
    finally:
        ended = True  # first: a signal already pending when the timer stops still runs expire
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_left > 0:
            left = outer_left - (time.monotonic() - started)
            signal.setitimer(signal.ITIMER_REAL, max(left, 1e-3))


class FootprintLimit:
    """``admits(dim, value)``: whether the reference can afford ``dim = value``; sizes in
    ``input_dims`` are left to the input cap."""

    def __init__(
        self,
        program: ReferenceProgram,
        cap: int,
        input_dims: frozenset[str] = frozenset(),
        seconds: float = FOOTPRINT_SECONDS,
    ) -> None:
        self.program, self.cap, self.input_dims, self.seconds = program, cap, input_dims, seconds
        self.reference_sizes = program.sizes
        self.refused: dict[str, str] = {}  # "dim=value" -> why
        self._admitted: dict[tuple[str, int], bool] = {}
        self._refused_from: dict[str, int] = {}  # per dim, the smallest refused size above ref
        self._limit: Footprint | None = None  # these three are set when first needed
        self._reference = Footprint(0, 0)
        self.deadline = 0.0

    def _start(self) -> Footprint:
        """The limit, from the reference case measured when first needed (it costs time)."""
        if self._limit is None:
            self.deadline = time.monotonic() + self.seconds
            measured = self._measure({})
            reference = measured if isinstance(measured, Footprint) else Footprint(0, 0)
            self._reference = reference
            self._limit = Footprint(
                FOOTPRINT_FACTOR * max(self.cap, reference.elements),
                FOOTPRINT_FACTOR * max(self.cap * FLOPS_PER_CAPPED_ELEMENT, reference.flops),
            )
        return self._limit

    @property
    def limit(self) -> Footprint:
        return self._start()

    @property
    def reference(self) -> Footprint:
        self._start()
        return self._reference

    def admits(self, dim: str, value: int) -> bool:
        if dim in self.input_dims:  # the input cap bounds it
            return True
        self._start()
        key = (dim, value)
        if key not in self._admitted:
            why = self._why_refused(dim, value)
            self._admitted[key] = why is None
            if why is not None:
                self.refused[f"{dim}={value}"] = why
                if value > self.reference_sizes.get(dim, value):
                    self._refused_from[dim] = min(self._refused_from.get(dim, value), value)
        return self._admitted[key]

    def _why_refused(self, dim: str, value: int) -> str | None:
        reference_value = self.reference_sizes.get(dim, value)
        above = value > reference_value
        smallest_refused = self._refused_from.get(dim)
        if above and smallest_refused is not None and value >= smallest_refused:
            return f"larger than the refused {dim}={smallest_refused}"
        if time.monotonic() >= self.deadline:
            if not above:
                return None
            return f"above the reference's {reference_value} after the measuring time"
        held = self._measure({dim: value})
        if held is _EXPIRED:
            return f"not measured within {self.seconds:g} s on the meta device"
        if held is None:  # the model cannot be built on the meta device
            return "not measurable on the meta device" if above else None
        if held.elements > self.limit.elements:
            return f"{held.elements:.3g} elements > {self.limit.elements:.3g}"
        if held.flops > self.limit.flops:
            return f"{held.flops:.3g} flops > {self.limit.flops:.3g}"
        return None

    def _measure(self, sizes: dict[str, int]) -> Any:
        """The footprint at ``sizes``, None (not measurable) or ``_EXPIRED``."""
        try:
            with time_limit(self.deadline - time.monotonic()):
                return self.program.footprint(**sizes)
        except Expired:
            return _EXPIRED

    def evidence(self) -> dict[str, Any]:
        limit = self._limit  # None: no size that shapes no input was asked about
        return {
            "footprint_limit": limit and {"elements": limit.elements, "flops": limit.flops},
            "footprint_factor": FOOTPRINT_FACTOR,
            "footprint_refused": dict(self.refused),
        }
