"""The judge's stopwatch inside the candidate's process (worker side of perf/).

Timing has to happen where the candidate runs, but a candidate shares that process and can
patch whatever it reaches: ``time.perf_counter``, ``torch.cuda.Event`` and its methods,
``torch.cuda.synchronize``, ``torch.cuda.set_stream``. Every function the protocol relies on
is therefore bound here, when the worker imports this module, before the candidate is
imported: a later patch replaces the attribute, never the function object held here. The
event methods are taken from the C base class (a static type, whose attributes cannot be
reassigned), the device-wide synchronize from ``torch._C`` itself, and the host clock is the
one ``sandbox/clocks.py`` bound before it installs its own choice-point clocks.

Two protocols:

* ``judged_trials`` (the verdict's numbers): one fresh input set per trial (the judge sends
  them; a cache keyed by shape, address or contents never hits one it saw before), the L2
  cache overwritten before each trial (``L2_FLUSH_BYTES``), then on a fresh stream: start
  event, the call, a *device-wide* synchronize, end event. Work the candidate left on a side
  stream, or returned before finishing, is inside the interval. Each trial's outputs are
  copied right after the interval and kept, so the judge can check any of them later
  without the candidate knowing which; an output that is not a plain ``torch.Tensor`` (a
  subclass could compute its values when read, outside the interval) is reported.
* ``kernelbench_trials`` (shown beside them, never used for acceptance): KernelBench's
  method as its harness describes it: a few warm-up calls, then N trials on the *same*
  inputs, each an event pair on the current stream around the call followed by a
  synchronize, no cache flush, with the torch and time functions as the candidate left
  them (what KernelBench itself would have measured, fooled or not).

On the CPU (the Triton interpreter) both protocols use the host clock instead of events:
numbers to test the protocol with, labelled as such, never device performance. They run with
one intra-op thread: after the flush, a pool of sleeping threads took milliseconds to wake on
a busy machine (a 13x300 softmax measured 24 ms instead of 0.03 ms), which timed the
scheduler, not the model.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelgate.sandbox.clocks import _real_perf_counter

# Bound now, before candidate code can patch them.
_perf_counter = _real_perf_counter
_Tensor = torch.Tensor
_type, _isinstance, _len, _range = type, isinstance, len, range
_clone = torch._C.TensorBase.clone
_fill = torch._C.TensorBase.fill_
_empty = torch.empty
_uint8 = torch.uint8
_get_num_threads, _set_num_threads = torch.get_num_threads, torch.set_num_threads
_CUDA_BUILT = hasattr(torch._C, "_cuda_synchronize")
if _CUDA_BUILT:
    _cuda_synchronize = torch._C._cuda_synchronize  # cudaDeviceSynchronize: every stream
    _Event = torch.cuda.Event
    _event_new = _Event.__new__
    _event_base = _Event.__mro__[1]  # torch._C._CudaEventBase: a static type
    _event_record = _event_base.record
    _event_elapsed = _event_base.elapsed_time
    _Stream = torch.cuda.Stream
    _stream_new = _Stream.__new__
    _set_stream = torch.cuda.set_stream
    _current_stream = torch.cuda.current_stream
    _device_context = torch.cuda.device

# Bytes written between trials: four times an H200's 60 MB L2 (the largest L2 shipped),
# so nothing the previous trial left in it survives.
L2_FLUSH_BYTES = 256 * 1024 * 1024
# On the CPU, a buffer past the last-level cache of the machines CI runs on.
CPU_FLUSH_BYTES = 64 * 1024 * 1024
FLOOR_TRIALS = 5  # trials of the protocol around a call that does nothing


@dataclass
class Trials:
    """What one protocol measured, in milliseconds per trial."""

    clock: str  # "cuda-events" or "cpu-perf-counter"
    ms: list[float] = field(default_factory=list)  # the measure the protocol stands on
    # judged_trials on CUDA: start event to an event recorded right after the call returned,
    # in stream order only (what a harness without the device-wide synchronize would see)
    stream_ms: list[float] = field(default_factory=list)
    host_ms: list[float] = field(default_factory=list)  # host clock around the interval
    snapshots: list[list[Any]] = field(default_factory=list)  # per trial, its outputs' copies
    not_plain: str = ""  # the first output that is no plain tensor, described
    # judged_trials: the same protocol around a call that does nothing: what the interval
    # costs by itself (on a device, mostly the device-wide synchronize's latency)
    floor_ms: list[float] = field(default_factory=list)


def flat_outputs(value: Any) -> list[Any]:
    """The leaves of a call's outputs (tuples and lists flattened), in order."""
    if _isinstance(value, list | tuple):
        return [leaf for item in value for leaf in flat_outputs(item)]
    return [value]


def _snapshot(outputs: Any, trials: Trials, index: int) -> list[Any]:
    """Copies of ``outputs`` as they are now; notes the first output that is not a plain
    tensor (its values could be computed when read: copying it would run that work)."""
    copies: list[Any] = []
    for k, leaf in enumerate(flat_outputs(outputs)):
        if _isinstance(leaf, _Tensor) and _type(leaf) is not _Tensor:
            if not trials.not_plain:
                trials.not_plain = (
                    f"trial {index}, output {k} is a {_type(leaf).__qualname__}, not a plain "
                    "torch.Tensor: its values could be computed when read, after the interval"
                )
            copies.append(None)
        elif _isinstance(leaf, _Tensor):
            copies.append(_clone(leaf))
        else:
            copies.append(leaf)
    return copies


def judged_trials(
    call: Callable[..., Any],
    input_sets: Sequence[list[Any]],
    device: torch.device,
    *,
    keep_outputs: bool = True,
    flush_bytes: int | None = None,
) -> Trials:
    """Time ``call`` once per input set under the judge's protocol (see the module)."""
    if device.type == "cuda":
        trials = _judged_cuda(call, input_sets, device, keep_outputs, flush_bytes)
        floor = _judged_cuda(_nothing, input_sets[:FLOOR_TRIALS], device, False, flush_bytes)
    else:
        with _one_thread():
            trials = _judged_cpu(call, input_sets, keep_outputs, flush_bytes)
            floor = _judged_cpu(_nothing, input_sets[:FLOOR_TRIALS], False, flush_bytes)
    trials.floor_ms = floor.ms
    return trials


def _nothing(*inputs: Any) -> None:
    """A call that does no work: the protocol's own cost (``Trials.floor_ms``)."""


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """One intra-op thread for the duration (CPU timing: see the module)."""
    threads = _get_num_threads()
    _set_num_threads(1)
    try:
        yield
    finally:
        _set_num_threads(threads)


def _judged_cpu(
    call: Callable[..., Any],
    input_sets: Sequence[list[Any]],
    keep_outputs: bool,
    flush_bytes: int | None,
) -> Trials:
    trials = Trials("cpu-perf-counter")
    flush = _empty(CPU_FLUSH_BYTES if flush_bytes is None else flush_bytes, dtype=_uint8)
    for index in _range(_len(input_sets)):
        _fill(flush, index & 0xFF)
        started = _perf_counter()
        outputs = call(*input_sets[index])
        elapsed = (_perf_counter() - started) * 1e3
        trials.ms.append(elapsed)
        trials.host_ms.append(elapsed)
        copies = _snapshot(outputs, trials, index)  # before any late work could land
        if keep_outputs:
            trials.snapshots.append(copies)
        del outputs
    return trials


def _judged_cuda(
    call: Callable[..., Any],
    input_sets: Sequence[list[Any]],
    device: torch.device,
    keep_outputs: bool,
    flush_bytes: int | None,
) -> Trials:
    trials = Trials("cuda-events")
    with _device_context(device):
        stream = _stream_new(_Stream, device=device)  # fresh: no state of earlier calls
        flush = _empty(
            L2_FLUSH_BYTES if flush_bytes is None else flush_bytes, dtype=_uint8, device=device
        )
        previous = _current_stream(device)
        try:
            for index in _range(_len(input_sets)):
                _set_stream(stream)  # again every trial: the candidate may have moved it
                _fill(flush, index & 0xFF)  # evicts what the last trial left in L2
                start = _event_new(_Event, enable_timing=True)
                returned = _event_new(_Event, enable_timing=True)
                end = _event_new(_Event, enable_timing=True)
                _cuda_synchronize()  # the flush and everything before it are done
                host = _perf_counter()
                _event_record(start, stream)
                outputs = call(*input_sets[index])
                _event_record(returned, stream)
                _cuda_synchronize()  # side streams, work still running: all of it counts
                _event_record(end, stream)
                _cuda_synchronize()
                trials.host_ms.append((_perf_counter() - host) * 1e3)
                trials.ms.append(float(_event_elapsed(start, end)))
                trials.stream_ms.append(float(_event_elapsed(start, returned)))
                _set_stream(stream)
                copies = _snapshot(outputs, trials, index)
                _cuda_synchronize()
                if keep_outputs:
                    trials.snapshots.append(copies)
                del outputs
        finally:
            _set_stream(previous)
    return trials


def kernelbench_trials(
    call: Callable[..., Any],
    inputs: list[Any],
    device: torch.device,
    *,
    warmup: int,
    trials: int,
) -> Trials:
    """KernelBench's method (see the module): the same inputs every trial, no flush, an
    event pair on the current stream around each call, then a synchronize.

    Deliberately with the functions as they are *now* (``torch.cuda.Event``, its methods,
    ``torch.cuda.synchronize``, ``time.perf_counter`` looked up at each use), as a harness
    in the candidate's process has them: this is what KernelBench would have reported,
    patched clocks included. It is shown beside the judged numbers, never used for them.
    """
    import time

    if device.type != "cuda":
        measured = Trials("cpu-perf-counter")
        with _one_thread():
            for _ in _range(warmup):
                call(*inputs)
            for _ in _range(trials):
                started = time.perf_counter()
                call(*inputs)
                measured.ms.append((time.perf_counter() - started) * 1e3)
        measured.host_ms = list(measured.ms)
        return measured
    measured = Trials("cuda-events")
    for _ in _range(warmup):
        call(*inputs)
        torch.cuda.synchronize(device)
    for _ in _range(trials):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        host = _perf_counter()
        start.record()
        call(*inputs)
        end.record()
        torch.cuda.synchronize(device)
        measured.host_ms.append((_perf_counter() - host) * 1e3)
        measured.ms.append(float(start.elapsed_time(end)))
    return measured
