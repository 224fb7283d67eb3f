"""Writing evidence so that a reader sees whole files only, and can tell if one changed.

Why: a verdict is worth what its evidence file is worth. A file written in place can be
read half written (a judge killed mid-write), and nothing tells a reader that it was
rewritten afterwards (a candidate's leftover process, issue 18). Every evidence file the
judge writes therefore goes through ``write_atomic``: a temporary file in the same folder,
flushed and fsynced, then renamed over the target (``os.replace`` is atomic within one file
system), and its SHA-256 is returned so that the caller can print it or store it. The
digest is of the exact bytes on disk, so ``sha256sum FILE`` gives the same hex string.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path

DIGEST_BLOCK = 1 << 20  # bytes read at a time when hashing a file


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of ``data`` (what ``sha256sum`` prints for a file holding it)."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of the file at ``path``, read in blocks (an evidence file can be large).

    Raises ``OSError`` when the file cannot be read: a missing file has no digest, and the
    caller decides what that means.
    """
    digest = hashlib.sha256()
    with Path(path).open("rb") as stream:
        for block in iter(lambda: stream.read(DIGEST_BLOCK), b""):
            digest.update(block)
    return digest.hexdigest()


def _current_umask() -> int:
    """The process's umask (only readable by setting it; set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, data: bytes | str) -> str:
    """Replace ``path`` with ``data`` whole, durably; return the SHA-256 of what was written.

    The temporary file lives in the target's folder (a rename across file systems is a copy,
    not atomic) under a hidden name that no reader looks for; it is removed if anything
    fails before the rename, so an interrupted write leaves the old file (or none), never a
    partial one. The file gets the permissions an ordinary ``open`` would give it (mkstemp's
    are owner-only), and the folder is fsynced so that the rename survives a power cut.
    """
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else bytes(data)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}.", suffix=".partial"
    )
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(payload)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o666 & ~_current_umask())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    _fsync_folder(path.parent)
    return sha256_bytes(payload)


def _fsync_folder(folder: Path) -> None:
    """Make a rename in ``folder`` durable (a no-op where folders cannot be opened)."""
    try:
        descriptor = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(descriptor)
    finally:
        os.close(descriptor)
