"""A judge waits for the GPU by sleeping, not spinning.

CUDA's default wait policy (``CU_CTX_SCHED_AUTO``) spins the waiting host thread whenever the
process has fewer CUDA contexts than the host has cores, which is always true for one judge.
In an audit a dozen judges share one GPU and one host, each given one core; a judge's
blocking copy of an oracle result or a candidate's output then spins that core until the
GPU, time-sliced between the dozen, has done the judge's queued work. Profiled on the H200
(2026-12-04, 52 judges of the CUDA-L1 h100 audit, ``benchmarks/judge_profile.py``), half the
judges' CPU time was inside blocking copies (``Tensor.to``, ``Tensor.cpu``) while the GPU was
20-70 % busy and every host core taken. ``CU_CTX_SCHED_BLOCKING_SYNC`` makes the thread
sleep until the GPU signals, at a cost of microseconds a wait; nothing a judge measures
depends on it (candidate timings are the worker's, on CUDA events).

The flag is set on each visible device's primary context (the one torch uses) before the
judge's first CUDA call; set later it may not take. ``KERNELGATE_CUDA_WAIT=spin`` keeps
CUDA's default (for measuring the difference).
"""

from __future__ import annotations

import ctypes
import os

ENV = "KERNELGATE_CUDA_WAIT"  # "spin": CUDA's default; anything else: block
CU_CTX_SCHED_BLOCKING_SYNC = 0x04
CU_CTX_SCHED_MASK = 0x07


def block_on_device_waits() -> str | None:
    """Make this process's CUDA waits sleep instead of spin (call before CUDA is first used
    here); None when done, else why not (no driver, no device, asked not to), never raises."""
    if os.environ.get(ENV, "").strip().lower() == "spin":
        return f"{ENV}=spin"
    cuda = _initialised_driver()
    if isinstance(cuda, str):
        return cuda
    count = ctypes.c_int()
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return "the CUDA driver did not initialise"
    if count.value == 0:
        return "no CUDA device visible"
    set_flags = getattr(cuda, "cuDevicePrimaryCtxSetFlags_v2", None) or getattr(
        cuda, "cuDevicePrimaryCtxSetFlags", None
    )
    if set_flags is None:
        return "this CUDA driver cannot set a primary context's flags"
    failed = [
        index
        for index in range(count.value)
        if (device := _device(cuda, index)) is None
        or set_flags(device, ctypes.c_uint(CU_CTX_SCHED_BLOCKING_SYNC)) != 0
    ]
    return f"the flag was refused on device(s) {failed}" if failed else None


def primary_context_schedule(index: int = 0) -> int | None:
    """The scheduling bits (``CU_CTX_SCHED_*``) of device ``index``'s primary context, or
    None where the driver cannot say (for the tests of ``block_on_device_waits``)."""
    cuda = _initialised_driver()
    device = None if isinstance(cuda, str) else _device(cuda, index)
    if device is None:
        return None
    flags, active = ctypes.c_uint(), ctypes.c_int()
    state = cuda.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags), ctypes.byref(active))
    return None if state != 0 else flags.value & CU_CTX_SCHED_MASK


def _initialised_driver() -> ctypes.CDLL | str:
    """libcuda, initialised, or why it is not there."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return f"no CUDA driver: {exc}"
    return cuda if cuda.cuInit(0) == 0 else "the CUDA driver did not initialise"


def _device(cuda: ctypes.CDLL, index: int) -> ctypes.c_int | None:
    device = ctypes.c_int()
    return device if cuda.cuDeviceGet(ctypes.byref(device), index) == 0 else None
