"""The byte protocol between judge and worker.

A frame is an 8-byte big-endian header length, a JSON header, then raw blobs whose lengths
the header lists. JSON and raw bytes are the only things the judge parses from the worker:
no pickle, so a hostile worker can send wrong bytes but never run code in the judge.

Tensors travel as their whole storage (guard bands included) plus shape, stride and offset;
the receiver rebuilds the view after checking that it lies inside the storage.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import struct
import time
from dataclasses import dataclass
from typing import Any

import torch

MAX_HEADER_BYTES = 64 * 1024 * 1024
MAX_BLOB_BYTES = 64 * 1024**3
PIPE_BYTES = 1 << 20  # Linux's default ceiling for an unprivileged pipe (pipe-max-size)
_F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)

DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}


class WireError(Exception):
    """The peer sent something that is not a well-formed frame."""


class PeerTimeout(Exception):
    """No complete frame arrived before the deadline."""


class PeerGone(Exception):
    """The peer closed its end (it exited or crashed)."""


def dtype_name(dtype: torch.dtype) -> str:
    try:
        return DTYPE_NAMES[dtype]
    except KeyError:
        raise WireError(f"dtype {dtype} cannot cross the wire") from None


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
    """A tensor as it crossed the wire: its whole storage (CPU) and the view into it."""

    storage: torch.Tensor  # 1-D, of the tensor's dtype, CPU
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
    value: Any, blobs: list[Any], storages: list[torch.UntypedStorage] | None = None
) -> dict[str, Any]:
    """Encode a (nested) value: tensors as storages, containers recursively, scalars as JSON.

    Each tensor's storage is asked for once: a tensor subclass may materialise a fresh one
    on every request, and its bytes and address must then be those of the same storage.
    ``storages`` collects the storages encoded, for a caller that must keep them alive (a
    freed temporary's address is handed out again, which reads as reuse).
    """
    if isinstance(value, torch.Tensor):
        storage = value.untyped_storage()
        if storages is not None:
            storages.append(storage)
        blobs.append(untyped_storage_bytes(storage, value.device))
        return {
            "t": "tensor",
            "dtype": dtype_name(value.dtype),
            "shape": list(value.shape),
            "stride": list(value.stride()),
            "offset": value.storage_offset(),
            "address": storage.data_ptr(),
            "blob": len(blobs) - 1,
        }
    if isinstance(value, WireTensor):
        blobs.append(storage_bytes(value.storage))
        return {
            "t": "tensor",
            "dtype": dtype_name(value.storage.dtype),
            "shape": list(value.shape),
            "stride": list(value.stride),
            "offset": value.offset,
            "blob": len(blobs) - 1,
        }
    if isinstance(value, list | tuple):
        items = [encode_value(v, blobs, storages) for v in value]
        return {"t": type(value).__name__, "items": items}
    if value is None or isinstance(value, bool | int | float | str):
        if isinstance(value, float) and (value != value or abs(value) == float("inf")):
            return {"t": "float", "repr": repr(value)}
        return {"t": "value", "v": value}
    if isinstance(value, torch.dtype):
        return {"t": "dtype", "v": dtype_name(value)}
    raise WireError(f"cannot send a value of type {type(value).__name__}")


def decode_value(node: Any, blobs: list[bytes]) -> Any:
    """Inverse of ``encode_value``; validates everything, since the sender may be hostile."""
    if not isinstance(node, dict) or "t" not in node:
        raise WireError("malformed value node")
    kind = node["t"]
    if kind == "tensor":
        return _decode_tensor(node, blobs)
    if kind in ("list", "tuple"):
        items = [decode_value(item, blobs) for item in node.get("items", [])]
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
            raise WireError("unknown dtype")
        return DTYPES[node["v"]]
    raise WireError(f"unknown value kind {kind!r}")


def _ints(value: Any, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(type(v) is int for v in value):
        raise WireError(f"malformed {what}")
    return tuple(value)


def _decode_tensor(node: dict[str, Any], blobs: list[bytes]) -> WireTensor:
    dtype = DTYPES.get(node.get("dtype"))
    if dtype is None:
        raise WireError(f"unknown dtype {node.get('dtype')!r}")
    shape, stride = _ints(node.get("shape"), "shape"), _ints(node.get("stride"), "stride")
    offset, index, address = node.get("offset"), node.get("blob"), node.get("address", 0)
    if len(shape) != len(stride) or any(s < 0 for s in shape):
        raise WireError("shape and stride disagree")
    if type(offset) is not int or offset < 0 or type(index) is not int or type(address) is not int:
        raise WireError("malformed tensor header")
    if not 0 <= index < len(blobs):
        raise WireError("tensor names a missing blob")
    blob = blobs[index]
    itemsize = torch.empty(0, dtype=dtype).element_size()
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
    tensor = WireTensor(storage, shape, stride, offset, address, len(blob))
    if any(s < 0 for s in stride):
        raise WireError("negative strides are not supported")
    if tensor.extent and offset + tensor.extent > storage.numel():
        raise WireError("view reaches past the end of its storage")
    return tensor
