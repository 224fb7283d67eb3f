"""The byte protocol between judge and worker.

A frame is an 8-byte big-endian header length, a JSON header, then raw blobs whose lengths
the header lists. JSON and raw bytes are the only things the judge parses from the worker:
no pickle, so a hostile worker can send wrong bytes but never run code in the judge.

Tensors travel as their whole storage (guard bands included) plus shape, stride and offset;
the receiver rebuilds the view after checking that it lies inside the storage. In device mode
a storage's bytes may instead stay on the device: the node then names a CUDA IPC handle, an
offset and a size (sandbox/cuda_ipc.py) where a blob index would be, and the receiver copies
them out of the mapped allocation after checking that they lie inside it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kernelgate.sandbox.cuda_ipc import IpcError, IpcRef

# How a storage's bytes may leave without a blob: node fields (``IpcRef.to_node``), or None
# for "send them as a blob". How a receiver turns such a reference into bytes it owns.
Carry = Callable[[torch.UntypedStorage], dict[str, Any] | None]
ReadRef = Callable[[IpcRef], torch.Tensor]

MAX_HEADER_BYTES = 64 * 1024 * 1024
MAX_BLOB_BYTES = 64 * 1024**3
PIPE_BYTES = 1 << 20  # Linux's default ceiling for an unprivileged pipe (pipe-max-size)
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)

# Every dtype whose elements are whole bytes with one value each, that the float64 oracle
# can read (``Tensor.to(torch.float64)`` is exact for all of them but the widest integers,
# which the oracle keeps as they are) and that PyTorch can copy: the wire carries raw
# storages, so a dtype that cannot be copied or compared element by element cannot be judged.
# Names are looked up, not spelled as attributes: the unsigned integers beyond uint8 arrived
# in torch 2.3 and float8_e8m0fnu in 2.7, and the judge must load on older torch too.
SUPPORTED_DTYPE_NAMES: tuple[str, ...] = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint64",
    "uint32",
    "uint16",
    "uint8",
    "bool",
    "complex64",
    "complex128",
)
DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in SUPPORTED_DTYPE_NAMES
    if isinstance(getattr(torch, name, None), torch.dtype)
}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}
# Why the dtypes torch has beyond ``DTYPES`` are not judged, for the error that names them.
_UNSUPPORTED_WHY = {
    "complex32": "complex32 (chalf) is experimental in PyTorch: most ops, float64 included, "
    "are missing for it",
    "q": "quantized dtypes carry their scale and zero point outside the storage",
    "bits": "bits dtypes are untyped bit containers with no arithmetic",
    "sub-byte": "sub-byte dtypes pack several values into a byte and PyTorch cannot copy them",
}


class WireError(Exception):
    """The peer sent something that is not a well-formed frame."""


class PeerTimeout(Exception):
    """No complete frame arrived before the deadline."""


class PeerGone(Exception):
    """The peer closed its end (it exited or crashed)."""


class UnsupportedDtype(WireError):
    """A tensor of a dtype kernelgate cannot judge (see ``DTYPES``); the message says which
    dtype, why, and what is supported."""


def unsupported_reason(dtype: torch.dtype) -> str:
    """Why ``dtype`` (not in ``DTYPES``) cannot be judged, in a few words."""
    name = str(dtype).removeprefix("torch.")
    if name == "complex32":
        return _UNSUPPORTED_WHY["complex32"]
    if name.startswith(("qint", "quint")):
        return _UNSUPPORTED_WHY["q"]
    if name.startswith("bits"):
        return _UNSUPPORTED_WHY["bits"]
    if name.startswith(("int", "uint", "float4")) or name.endswith("_x2"):
        return _UNSUPPORTED_WHY["sub-byte"]
    return "this torch is newer than kernelgate's list of dtypes"


def unsupported_message(dtype: torch.dtype) -> str:
    """The one line an ``unsupported dtype`` error carries: what, why, what to do."""
    return (
        f"unsupported dtype {dtype}: {unsupported_reason(dtype)}; kernelgate judges tensors "
        f"of {', '.join(DTYPES)} (give the reference and candidate inputs and outputs of one "
        "of those, e.g. unpacked or dequantized)"
    )


def dtype_name(dtype: torch.dtype) -> str:
    """The wire name of ``dtype``; ``UnsupportedDtype`` for one kernelgate cannot judge."""
    try:
        return DTYPE_NAMES[dtype]
    except KeyError:
        raise UnsupportedDtype(unsupported_message(dtype)) from None


def unsupported_dtypes(value: Any) -> list[tuple[str, torch.dtype]]:
    """Where ``value`` (nested lists, tuples and dicts) holds a tensor of a dtype outside
    ``DTYPES``: (path such as ``[1][0]``, dtype) pairs, in order."""
    if isinstance(value, torch.Tensor):
        return [] if value.dtype in DTYPE_NAMES else [("", value.dtype)]
    items: Any = ()
    if isinstance(value, list | tuple):
        items = enumerate(value)
    elif isinstance(value, dict):
        items = value.items()
    return [
        (f"[{key!r}]{path}", dtype) for key, v in items for path, dtype in unsupported_dtypes(v)
    ]


def pipe() -> tuple[int, int]:
    """``os.pipe()`` with a 1 MiB buffer where Linux allows it.

    Storages of KernelBench-sized tensors cross the wire several times a call; with the
    default 64 KiB buffer a 268 MB storage took 4,000 wake-ups each way.
    """
    read_fd, write_fd = os.pipe()
    with contextlib.suppress(OSError):
        fcntl.fcntl(write_fd, _F_SETPIPE_SZ, PIPE_BYTES)
    return read_fd, write_fd


def send_frame(fd: int, header: dict[str, Any], blobs: list[Any] = ()) -> None:
    header = {**header, "blobs": [len(b) for b in blobs]}
    payload = json.dumps(header).encode()
    _write_all(fd, struct.pack(">Q", len(payload)) + payload)
    for blob in blobs:
        _write_all(fd, blob)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data).cast("B")
    while view:
        written = os.write(fd, view[: 1 << 24])
        view = view[written:]


def recv_frame(fd: int, deadline: float | None = None) -> tuple[dict[str, Any], list[bytearray]]:
    (length,) = struct.unpack(">Q", _read_exact(fd, 8, deadline))
    if length > MAX_HEADER_BYTES:
        raise WireError(f"header of {length} bytes exceeds the limit")
    try:
        header = json.loads(_read_exact(fd, length, deadline))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise WireError("header is not a JSON object")
    sizes = header.get("blobs", [])
    if not isinstance(sizes, list) or not all(
        isinstance(s, int) and 0 <= s <= MAX_BLOB_BYTES for s in sizes
    ):
        raise WireError("malformed blob list")
    return header, [_read_exact(fd, size, deadline) for size in sizes]


def _read_exact(fd: int, size: int, deadline: float | None) -> bytearray:
    """Exactly ``size`` bytes, read straight into one buffer (no chunk copies)."""
    buffer = bytearray(size)
    view, filled = memoryview(buffer), 0
    while filled < size:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PeerTimeout()
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                raise PeerTimeout()
        got = os.readv(fd, [view[filled : filled + (1 << 24)]])
        if not got:
            raise PeerGone()
        filled += got
    return buffer


@dataclass
class WireTensor:
    """A tensor as it crossed the wire: its whole storage and the view into it.

    The storage is the receiver's own copy: on the host when it came as bytes, on the
    device when it came by IPC handle (then nothing of the sender's memory stays mapped
    behind it: what the sender writes later changes nothing here).
    """

    storage: torch.Tensor  # 1-D, of the tensor's dtype, CPU or the receiver's CUDA copy
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    address: int = 0  # the storage's device address in the sender, for alias checks
    nbytes: int = 0

    def view(self) -> torch.Tensor:
        return self.storage.as_strided(self.shape, self.stride, self.offset)

    @property
    def extent(self) -> int:
        """Number of storage elements the view spans, from ``offset``."""
        return view_extent(self.shape, self.stride)


def view_extent(shape: tuple[int, ...], stride: tuple[int, ...]) -> int:
    """Storage elements a (shape, stride) view spans from its offset; 0 for an empty view."""
    if any(size == 0 for size in shape):
        return 0
    return 1 + sum((size - 1) * abs(step) for size, step in zip(shape, stride))


def storage_bytes(tensor: torch.Tensor) -> memoryview:
    """The whole storage behind ``tensor``, as raw bytes on the host.

    A view, not a copy, when the storage is already on the host: the frame is written
    before anything can change it.
    """
    return untyped_storage_bytes(tensor.untyped_storage(), tensor.device)


def untyped_storage_bytes(storage: torch.UntypedStorage, device: torch.device) -> memoryview:
    """The bytes of ``storage`` on the host (see ``storage_bytes``)."""
    raw = torch.empty(0, dtype=torch.uint8, device=device)
    raw.set_(storage)
    return memoryview(raw.cpu().numpy())


def encode_value(
    value: Any,
    blobs: list[Any],
    storages: list[torch.UntypedStorage] | None = None,
    carry: Carry | None = None,
) -> dict[str, Any]:
    """Encode a (nested) value: tensors as storages, containers recursively, scalars as JSON.

    Each tensor's storage is asked for once: a tensor subclass may materialise a fresh one
    on every request, and its bytes and address must then be those of the same storage.
    ``storages`` collects the storages encoded, for a caller that must keep them alive (a
    freed temporary's address is handed out again, which reads as reuse). ``carry``: a
    storage it takes (an IPC handle's node fields) needs no blob; one it declines (None)
    goes as bytes.
    """
    if isinstance(value, torch.Tensor):
        name = dtype_name(value.dtype)  # first: a quantized tensor's storage is no plain one
        storage = value.untyped_storage()
        if storages is not None:
            storages.append(storage)
        node = {
            "t": "tensor",
            "dtype": name,
            "shape": list(value.shape),
            "stride": list(value.stride()),
            "offset": value.storage_offset(),
            "address": storage.data_ptr(),
        }
        return node | _storage_node(storage, value.device, blobs, carry)
    if isinstance(value, WireTensor):
        name = dtype_name(value.storage.dtype)
        node = {
            "t": "tensor",
            "dtype": name,
            "shape": list(value.shape),
            "stride": list(value.stride),
            "offset": value.offset,
        }
        storage = value.storage.untyped_storage()
        return node | _storage_node(storage, value.storage.device, blobs, carry)
    if isinstance(value, list | tuple):
        items = [encode_value(v, blobs, storages, carry) for v in value]
        # a named tuple (``torch.return_types.topk``) crosses as the tuple it is
        return {"t": "list" if isinstance(value, list) else "tuple", "items": items}
    if value is None or isinstance(value, bool | int | float | str):
        if isinstance(value, float) and (value != value or abs(value) == float("inf")):
            return {"t": "float", "repr": repr(value)}
        return {"t": "value", "v": value}
    if isinstance(value, torch.dtype):
        return {"t": "dtype", "v": dtype_name(value)}
    raise WireError(f"cannot send a value of type {type(value).__name__}")


def _storage_node(
    storage: torch.UntypedStorage, device: torch.device, blobs: list[Any], carry: Carry | None
) -> dict[str, Any]:
    """The node fields that carry ``storage``'s bytes: ``carry``'s, else a blob's index."""
    carried = carry(storage) if carry is not None else None
    if carried is not None:
        return carried
    blobs.append(untyped_storage_bytes(storage, device))
    return {"blob": len(blobs) - 1}


def decode_value(node: Any, blobs: list[bytes], read: ReadRef | None = None) -> Any:
    """Inverse of ``encode_value``; validates everything, since the sender may be hostile.

    ``read`` copies the bytes an IPC reference names (``cuda_ipc.Mappings.read``); without
    it a tensor sent by handle is malformed.
    """
    if not isinstance(node, dict) or "t" not in node:
        raise WireError("malformed value node")
    kind = node["t"]
    if kind == "tensor":
        return _decode_tensor(node, blobs, read)
    if kind in ("list", "tuple"):
        items = [decode_value(item, blobs, read) for item in node.get("items", [])]
        return items if kind == "list" else tuple(items)
    if kind == "value":
        value = node.get("v")
        if value is not None and not isinstance(value, bool | int | float | str):
            raise WireError("malformed scalar")
        return value
    if kind == "float":
        text = node.get("repr")
        if text not in ("nan", "inf", "-inf"):
            raise WireError("malformed special float")
        return float(text)
    if kind == "dtype":
        if node.get("v") not in DTYPES:
            raise WireError(f"unknown dtype {str(node.get('v'))[:40]!r}")
        return DTYPES[node["v"]]
    raise WireError(f"unknown value kind {kind!r}")


def _ints(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise WireError(f"malformed {what}")
    return tuple(value)


def _decode_tensor(
    node: dict[str, Any], blobs: list[bytes], read: ReadRef | None = None
) -> WireTensor:
    dtype = DTYPES.get(node.get("dtype"))
    if dtype is None:
        raise WireError(f"unknown dtype {str(node.get('dtype'))[:40]!r}")
    shape, stride = _ints(node.get("shape"), "shape"), _ints(node.get("stride"), "stride")
    offset, address = node.get("offset"), node.get("address", 0)
    if len(shape) != len(stride) or any(s < 0 for s in shape):
        raise WireError("shape and stride disagree")
    if type(offset) is not int or offset < 0 or type(address) is not int:
        raise WireError("malformed tensor header")
    if any(s < 0 for s in stride):
        raise WireError("negative strides are not supported")
    itemsize = torch.empty(0, dtype=dtype).element_size()
    if "ipc" in node:
        storage, nbytes = _ipc_storage(node, dtype, itemsize, read)
    else:
        storage, nbytes = _blob_storage(node, blobs, dtype, itemsize)
    tensor = WireTensor(storage, shape, stride, offset, address, nbytes)
    if tensor.extent and offset + tensor.extent > storage.numel():
        raise WireError("view reaches past the end of its storage")
    return tensor


def _blob_storage(
    node: dict[str, Any], blobs: list[bytes], dtype: torch.dtype, itemsize: int
) -> tuple[torch.Tensor, int]:
    index = node.get("blob")
    if type(index) is not int:
        raise WireError("malformed tensor header")
    if not 0 <= index < len(blobs):
        raise WireError("tensor names a missing blob")
    blob = blobs[index]
    if len(blob) % itemsize:
        raise WireError("storage size is not a whole number of elements")
    # The storage is the received buffer itself. Two tensors naming one blob share it, which
    # a hostile sender could arrange, so receivers treat storages as read-only (the judge
    # only compares them).
    buffer = blob if isinstance(blob, bytearray) else bytearray(blob)
    storage = (
        torch.frombuffer(buffer, dtype=torch.uint8).view(dtype)
        if buffer
        else torch.empty(0, dtype=dtype)
    )
    return storage, len(blob)


def _ipc_storage(
    node: dict[str, Any], dtype: torch.dtype, itemsize: int, read: ReadRef | None
) -> tuple[torch.Tensor, int]:
    """The receiver's own copy of the bytes an IPC reference names, checked all the way:
    the reference's fields here, its range against the opened allocation in ``read``."""
    if read is None:
        raise WireError("a tensor sent by IPC handle where only bytes were asked for")
    try:
        ref = IpcRef.parse(node, MAX_BLOB_BYTES)
    except ValueError as exc:
        raise WireError(f"malformed IPC tensor: {exc}") from None
    if ref.nbytes % itemsize:
        raise WireError("storage size is not a whole number of elements")
    try:
        raw = read(ref)
    except (IpcError, ValueError) as exc:
        raise WireError(f"IPC tensor cannot be read: {exc}") from None
    if raw.numel() != ref.nbytes:
        raise WireError("IPC copy has the wrong size")
    return raw.view(dtype), ref.nbytes
