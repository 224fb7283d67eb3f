"""Device-resident storages between judge and worker: CUDA IPC through the driver API.

Over the pipe a KernelBench-sized storage (268 MB) cost about a second a call: a copy to
the host, a write into the pipe, a read out of it, a copy back. Here the sender exports a
CUDA IPC memory handle (64 opaque bytes) for the allocation holding the storage, and the
receiver maps that allocation, copies the bytes it was told about device to device into
memory it owns, and lets the mapping go (the judge keeps a few mappings open for the
session: see ``Mappings``).

Why the driver API through ctypes, not ``UntypedStorage._share_cuda_``: torch's sharing
keeps a reference-count file in shared memory that both processes open, and the worker's
``/dev/shm`` is a private tmpfs (sandbox/confine.py); the handle alone is all that must
cross, and libcuda.so.1 is on every machine that runs CUDA at all.

Trust: the judge never exports memory that holds anything but one call's inputs (a fresh
``cuMemAlloc`` per storage, never a block of torch's caching allocator, whose segment
could hold the judge's own tensors: an IPC handle maps the whole allocation). What the
worker sends is checked against what the driver says the mapping is; a bad handle, size
or offset is a ``WireError``, never a read out of range.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

HANDLE_BYTES = 64  # CU_IPC_HANDLE_SIZE
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1
_HEX_HANDLE = re.compile(f"[0-9a-f]{{{2 * HANDLE_BYTES}}}")
# The judge's cache of opened worker allocations. A hostile worker that hands out a new
# allocation every call cannot make the judge hold more than this many of its mappings.
MAX_OPEN_MAPPINGS = 16
# KERNELGATE_WIRE=pipe forces the byte path (benchmarks, a machine where IPC misbehaves).
ENV_SWITCH = "KERNELGATE_WIRE"
PIPE, IPC = "pipe", "cuda-ipc"
# Bound at import: the worker imports this module before candidate code, which may patch
# torch's allocation functions afterwards.
_empty = torch.empty


class IpcError(Exception):
    """A CUDA driver call for IPC failed (or the driver is not there)."""


class _Handle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * HANDLE_BYTES)]


class Driver:
    """The few libcuda entry points IPC needs, with their C signatures."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        ptr, size = ctypes.c_ulonglong, ctypes.c_size_t
        self._lib = lib

        def bind(*names: str, argtypes: list[Any]) -> Any:
            for name in names:  # the versioned symbol first: the plain one is the old ABI
                function = getattr(lib, name, None)
                if function is not None:
                    function.argtypes, function.restype = argtypes, ctypes.c_int
                    return function
            raise IpcError(f"libcuda has no {names[0]}")

        self._init = bind("cuInit", argtypes=[ctypes.c_uint])
        self._ctx_get = bind("cuCtxGetCurrent", argtypes=[ctypes.POINTER(ctypes.c_void_p)])
        self._ctx_set = bind("cuCtxSetCurrent", argtypes=[ctypes.c_void_p])
        self._device_get = bind(
            "cuDeviceGet", argtypes=[ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        )
        self._retain = bind(
            "cuDevicePrimaryCtxRetain", argtypes=[ctypes.POINTER(ctypes.c_void_p), ctypes.c_int]
        )
        self._range = bind(
            "cuMemGetAddressRange_v2",
            argtypes=[ctypes.POINTER(ptr), ctypes.POINTER(size), ptr],
        )
        self._get_handle = bind("cuIpcGetMemHandle", argtypes=[ctypes.POINTER(_Handle), ptr])
        self._open = bind(
            "cuIpcOpenMemHandle_v2",
            "cuIpcOpenMemHandle",
            argtypes=[ctypes.POINTER(ptr), _Handle, ctypes.c_uint],
        )
        self._close = bind("cuIpcCloseMemHandle", argtypes=[ptr])
        self._alloc = bind("cuMemAlloc_v2", argtypes=[ctypes.POINTER(ptr), size])
        self._free = bind("cuMemFree_v2", argtypes=[ptr])
        self._error_name = getattr(lib, "cuGetErrorName", None)
        if self._error_name is not None:
            self._error_name.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
        self._check(self._init(0), "cuInit")

    def _check(self, code: int, what: str) -> None:
        if code == 0:
            return
        name = ctypes.c_char_p()
        if self._error_name is not None and self._error_name(code, ctypes.byref(name)) == 0:
            raise IpcError(f"{what} failed: {name.value.decode(errors='replace')} ({code})")
        raise IpcError(f"{what} failed: CUDA error {code}")

    def use_device(self, index: int) -> None:
        """Make ``index``'s primary context (torch's) current on this thread if none is."""
        current = ctypes.c_void_p()
        self._check(self._ctx_get(ctypes.byref(current)), "cuCtxGetCurrent")
        if current.value:
            return
        device, context = ctypes.c_int(), ctypes.c_void_p()
        self._check(self._device_get(ctypes.byref(device), index), "cuDeviceGet")
        self._check(self._retain(ctypes.byref(context), device), "cuDevicePrimaryCtxRetain")
        self._check(self._ctx_set(context), "cuCtxSetCurrent")

    def address_range(self, address: int) -> tuple[int, int]:
        """(base, size) of the allocation that holds ``address``."""
        base, size = ctypes.c_ulonglong(), ctypes.c_size_t()
        self._check(
            self._range(ctypes.byref(base), ctypes.byref(size), address),
            "cuMemGetAddressRange",
        )
        return base.value, size.value

    def export(self, base: int) -> bytes:
        """The IPC handle of the allocation starting at ``base``."""
        handle = _Handle()
        self._check(self._get_handle(ctypes.byref(handle), base), "cuIpcGetMemHandle")
        return ctypes.string_at(ctypes.addressof(handle), HANDLE_BYTES)

    def open(self, handle: bytes) -> tuple[int, int]:
        """Map another process's allocation: (base here, size the driver says it has)."""
        raw = _Handle()
        ctypes.memmove(ctypes.addressof(raw), handle, HANDLE_BYTES)
        base = ctypes.c_ulonglong()
        self._check(
            self._open(ctypes.byref(base), raw, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
            "cuIpcOpenMemHandle",
        )
        try:
            mapped_base, size = self.address_range(base.value)
        except IpcError:
            self.close(base.value)
            raise
        return mapped_base, size

    def close(self, base: int) -> None:
        self._check(self._close(base), "cuIpcCloseMemHandle")

    def alloc(self, nbytes: int) -> int:
        address = ctypes.c_ulonglong()
        self._check(self._alloc(ctypes.byref(address), nbytes), "cuMemAlloc")
        return address.value

    def free(self, address: int) -> None:
        self._check(self._free(address), "cuMemFree")


@functools.cache
def driver() -> Driver:
    """The process's driver binding; ``IpcError`` where libcuda cannot be loaded."""
    try:
        return Driver(ctypes.CDLL("libcuda.so.1"))
    except OSError as exc:
        raise IpcError(f"libcuda.so.1 cannot be loaded: {exc}") from None


def forced_pipe() -> bool:
    """Whether the environment asks for the byte path (``KERNELGATE_WIRE=pipe``)."""
    return os.environ.get(ENV_SWITCH, "").strip().lower() == PIPE


def device_index(device: torch.device | str) -> int:
    device = torch.device(device)
    return device.index if device.index is not None else torch.cuda.current_device()


class _DeviceBytes:
    """``__cuda_array_interface__`` over raw device bytes, so torch can copy from and into
    memory it did not allocate (an IPC mapping, a ``cuMemAlloc``) without owning it."""

    def __init__(self, address: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": "|u1",
            "data": (address, False),
            "version": 2,
            "strides": None,
        }


def device_bytes(address: int, nbytes: int, device: torch.device) -> torch.Tensor:
    """A uint8 tensor over ``nbytes`` at ``address`` on ``device`` (not owned: valid only
    while that memory is)."""
    return torch.as_tensor(_DeviceBytes(address, nbytes), device=device)


def storage_as_bytes(storage: torch.UntypedStorage, device: torch.device) -> torch.Tensor:
    raw = _empty(0, dtype=torch.uint8, device=device)
    raw.set_(storage)
    return raw


# -- what crosses the wire ------------------------------------------------------------------


@dataclass(frozen=True)
class IpcRef:
    """Where a storage's bytes lie: ``nbytes`` from ``offset`` in the allocation ``handle``
    names. Parsed from the wire with every field checked (``parse``)."""

    handle: bytes
    offset: int
    nbytes: int

    def to_node(self) -> dict[str, Any]:
        return {"ipc": self.handle.hex(), "ipc_offset": self.offset, "nbytes": self.nbytes}

    @classmethod
    def parse(cls, node: dict[str, Any], max_bytes: int) -> IpcRef:
        """The reference a tensor node carries; ``ValueError`` for anything malformed."""
        text, offset, nbytes = node.get("ipc"), node.get("ipc_offset"), node.get("nbytes")
        if not isinstance(text, str) or not _HEX_HANDLE.fullmatch(text):
            raise ValueError(f"IPC handle is not {HANDLE_BYTES} bytes of lowercase hex")
        if type(offset) is not int or type(nbytes) is not int:
            raise ValueError("IPC offset and size must be integers")
        if offset < 0 or nbytes < 0 or nbytes > max_bytes or offset > (1 << 62):
            raise ValueError(f"IPC offset {offset} or size {nbytes} out of range")
        return cls(bytes.fromhex(text), offset, nbytes)


def check_inside(ref: IpcRef, mapped_bytes: int) -> None:
    """``ValueError`` unless ``ref``'s bytes lie inside a mapping of ``mapped_bytes``."""
    if ref.offset + ref.nbytes > mapped_bytes:
        raise ValueError(
            f"IPC range [{ref.offset}, {ref.offset + ref.nbytes}) reaches past the "
            f"{mapped_bytes}-byte allocation it names"
        )


# -- the receiving side ---------------------------------------------------------------------


@dataclass
class Mappings:
    """Opened IPC handles of the peer, and copies out of them into memory this side owns.

    ``keep``: how many mappings stay open between reads (the worker's caching allocator
    hands the same segments out call after call, and opening a handle costs); 0 closes each
    one after its copy (the worker, reading the judge's one-call allocations).
    """

    device: torch.device
    keep: int = MAX_OPEN_MAPPINGS
    _open: OrderedDict[bytes, tuple[int, int]] = field(default_factory=OrderedDict)

    def read(self, ref: IpcRef) -> torch.Tensor:
        """A uint8 tensor on ``device`` holding a copy of ``ref``'s bytes; ``IpcError`` if
        the handle does not open, ``ValueError`` if the range is not inside it."""
        if ref.nbytes == 0:
            return _empty(0, dtype=torch.uint8, device=self.device)
        cuda = driver()
        if self.device.type == "cuda":
            cuda.use_device(device_index(self.device))
        base, size = self._mapping(cuda, ref.handle)
        try:
            check_inside(ref, size)
            copy = _empty(ref.nbytes, dtype=torch.uint8, device=self.device)
            copy.copy_(device_bytes(base + ref.offset, ref.nbytes, self.device))
            # Before the mapping can go: the copy must have read it.
            if self.device.type == "cuda":
                torch.cuda.current_stream(self.device).synchronize()
        finally:
            if self.keep <= 0:
                self._forget(cuda, ref.handle)
        return copy

    def _mapping(self, cuda: Driver, handle: bytes) -> tuple[int, int]:
        if handle in self._open:
            self._open.move_to_end(handle)
            return self._open[handle]
        mapped = cuda.open(handle)
        self._open[handle] = mapped
        while len(self._open) > max(self.keep, 1):
            self._forget(cuda, next(iter(self._open)))
        return mapped

    def _forget(self, cuda: Driver, handle: bytes) -> None:
        mapped = self._open.pop(handle, None)
        if mapped is not None:
            # an error here: the peer's allocation went first, nothing of ours to release
            with contextlib.suppress(IpcError):
                cuda.close(mapped[0])

    def close(self) -> None:
        """Close every mapping still open (the session ends, or its worker does)."""
        if not self._open:
            return
        cuda = driver()
        for handle in list(self._open):
            self._forget(cuda, handle)

    def __len__(self) -> int:
        return len(self._open)


# -- the sending side -----------------------------------------------------------------------


@dataclass
class Exports:
    """Storages this side has handed out by handle, alive until ``release``.

    The judge stages each input storage in a ``cuMemAlloc`` of its own (``stage``), freed
    when the worker has answered; the worker exports its own storages (``export``), kept
    referenced until the judge's next request so that nothing reuses their memory while the
    judge copies out of it.
    """

    device: torch.device
    _held: list[torch.Tensor] = field(default_factory=list)
    _allocated: list[int] = field(default_factory=list)

    def stage(self, storage: torch.UntypedStorage) -> IpcRef | None:
        """Copy ``storage`` (any device) into a fresh allocation for this call only and
        return its reference; None for an empty storage (a blob carries it)."""
        if storage.nbytes() == 0:
            return None
        raw = storage_as_bytes(storage, storage.device)
        cuda = driver()
        cuda.use_device(device_index(self.device))
        address = cuda.alloc(raw.numel())
        self._allocated.append(address)
        device_bytes(address, raw.numel(), self.device).copy_(raw)
        torch.cuda.current_stream(self.device).synchronize()  # the peer reads it next
        return IpcRef(cuda.export(address), 0, raw.numel())

    def export(self, storage: torch.UntypedStorage, *, snapshot: bool) -> IpcRef | None:
        """The reference to ``storage`` (a CUDA one), held until ``release``; ``snapshot``
        first copies it, in stream order, to a buffer of its own (what a caller's next
        kernel would read, whatever runs later). None where the storage cannot be exported
        (on the host, empty, or not from ``cudaMalloc``): a blob carries it then."""
        if storage.device.type != "cuda" or storage.nbytes() == 0:
            return None
        raw = storage_as_bytes(storage, storage.device)
        if snapshot:
            raw = raw.clone()
        try:
            cuda = driver()
            cuda.use_device(device_index(storage.device))
            base, _ = cuda.address_range(raw.data_ptr())
            handle = cuda.export(base)
        except IpcError:
            return None
        self._held.append(raw)
        return IpcRef(handle, raw.data_ptr() - base, raw.numel())

    def release(self) -> None:
        """Let go of everything handed out (the peer has read it)."""
        self._held = []
        if self._allocated:
            cuda = driver()
            allocated, self._allocated = self._allocated, []
            for address in allocated:
                cuda.free(address)

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(self._held)
