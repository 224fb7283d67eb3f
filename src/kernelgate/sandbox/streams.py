"""Side streams, made visible: work a candidate puts on another CUDA stream is delayed.

A kernel launched on a side stream and never joined back to the caller's stream races with
whatever the caller does next. Whether the race shows depends on timing: the side stream
usually finishes first, so the outputs look right and the defect passes. The worker makes
the race deterministic instead:

* every switch to a stream other than the call's own enqueues a spin of ``DELAY_CYCLES`` on
  that stream, so its work lands well after anything ordered only on the call's stream;
* the worker reads the outputs on the call's stream, in stream order, before it synchronises
  the device (``read_in_call_order``), which is exactly what a caller's next kernel sees.

An honest candidate that joins its side stream (``wait_stream``, an event, a synchronise)
only waits longer; one that does not returns poison or stale values, which CMP-01, MEM-01
and ORD-02 judge.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch

# About 25 ms at an H200's 1.98 GHz: far longer than a launch, short enough not to matter.
DELAY_CYCLES = 50_000_000

_set_stream: Callable[[Any], None] = torch.cuda.set_stream
_current_stream: Callable[..., Any] = torch.cuda.current_stream
_stream_context: Callable[[Any], Any] = torch.cuda.stream
_sleep: Callable[[int], None] = torch.cuda._sleep


class SideStreamDelay:
    """Wraps ``torch.cuda.set_stream`` (which ``torch.cuda.stream(...)`` goes through)."""

    def __init__(self, cycles: int = DELAY_CYCLES) -> None:
        self.cycles = cycles
        self.call_stream: Any = None  # set for the duration of one candidate call
        self.delayed: set[int] = set()  # streams already delayed in the current call

    def install(self) -> None:
        delay = self

        def set_stream(stream: Any) -> None:
            _set_stream(stream)
            if stream is not None and delay.call_stream is not None:
                delay._on_switch(stream)

        torch.cuda.set_stream = set_stream

    def _on_switch(self, stream: Any) -> None:
        if stream == self.call_stream:
            return
        key = int(stream.cuda_stream)
        if key not in self.delayed:
            self.delayed.add(key)
            _sleep(self.cycles)  # enqueued on ``stream``, which is current now

    @contextlib.contextmanager
    def call(self, device: torch.device) -> Iterator[None]:
        """Delay side streams while one candidate call runs on ``device``'s current stream."""
        if device.type != "cuda":
            yield
            return
        self.call_stream, self.delayed = _current_stream(device), set()
        try:
            yield
        finally:
            self.call_stream = None

    def read_in_call_order(self, read: Callable[[], Any]) -> Any:
        """Run ``read`` (copies to the host) on the stream the call was made on; use it
        inside ``call``."""
        if self.call_stream is None:  # CPU: no streams
            return read()
        with _stream_context(self.call_stream):
            return read()
