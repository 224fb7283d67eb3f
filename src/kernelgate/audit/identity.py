"""What decides a record's row, digested: the key under which a verdict may be reused.

A row is reused (``reuse.py``) only where everything that decides it is the same: the bytes
the judge read (reference, candidate and, for a problem folder, the folder's files), the
record's format (AUTH-01's default share depends on it), the store settings that decide
rows, the judge's code (``judge.code_digest``) and the environment that ran it (torch,
Triton, CUDA, the device and the GPU's name). The judge records the first and the last in
each row as it judges (``inputs_sha256``, ``environment``), so a row carries its own
identity wherever its store is carried, reused rows included.

This module is imported by the judge child: it imports nothing of the audit's parent side.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from kernelgate.formats.corpus import CorpusRecord

# Verdicts that end a record's judging: an ``error`` (the judge failed) or ``unreadable``
# (never judged) row is no verdict about the pair, and is never reused.
FINAL_VERDICTS = ("verified", "narrowed", "rejected")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def source_digest(source: Path) -> str:
    """SHA-256 of a file, or of every file of a folder with its relative path.

    One digest for a corpus (a resume is checked against the corpus's content, not its
    path: a store carried to another machine resumes there only on the same records) and for
    a problem folder (its statement, tolerance and reference all live there).
    """
    digest = hashlib.sha256()
    files = [source] if source.is_file() else sorted(p for p in source.rglob("*") if p.is_file())
    for path in files:
        digest.update(str(path.relative_to(source) if path != source else path.name).encode())
        digest.update(b"\0")
        with path.open("rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def problem_folder(record: CorpusRecord) -> str | None:
    """The problem folder a record of format ``problem`` is judged against (None: other
    formats, which the reference's bytes decide alone)."""
    if record.format != "problem":
        return None
    folder = record.source_ids.get("problem")
    return str(folder) if folder else None


def inputs_digest(reference: bytes, candidate: bytes, problem: str | None) -> dict[str, Any]:
    """The row's ``inputs_sha256``: digests of what the judge read."""
    return {
        "reference": sha256_hex(reference),
        "candidate": sha256_hex(candidate),
        "problem": source_digest(Path(problem)) if problem else None,
    }


def judging_environment(device: str, *, every_gpu: bool = False) -> dict[str, Any]:
    """The versions and device that decide verdicts.

    In a judge (``every_gpu`` False) the GPU is the one it was pinned to; the audit's
    parent (``every_gpu`` True) cannot know which GPU a judge will get, so it names the
    one model every visible GPU shares, or ``mixed: ...``, which matches no judge's row:
    on a host of mixed GPUs nothing is reused. The parent asks a child process
    (``_gpu_names_from_a_child``); a judge, which uses its GPU anyway, asks torch.
    """
    import torch
    import triton

    env: dict[str, Any] = {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "device": device,
        "gpu": None,
    }
    if device != "cpu":
        if every_gpu:
            names = set(_gpu_names_from_a_child())
            env["gpu"] = names.pop() if len(names) == 1 else "mixed: " + ", ".join(sorted(names))
        elif torch.cuda.is_available():
            env["gpu"] = torch.cuda.get_device_name()
    return env


def _gpu_names_from_a_child() -> list[str]:
    """Every visible GPU's name as torch gives it, asked in a child process.

    Asking torch here would initialise CUDA in the audit's parent (``get_device_name``
    runs ``torch.cuda._lazy_init``), and torch then refuses CUDA in every process forked
    from it afterwards ("Cannot re-initialize CUDA in forked subprocess"). A child costs a
    torch import once an audit; one that fails names no GPU, which matches no judge's row
    (nothing is reused, nothing is wrong)."""
    script = (
        "import json, torch; n = torch.cuda.device_count() if torch.cuda.is_available() else 0;"
        " print(json.dumps([torch.cuda.get_device_name(i) for i in range(n)]))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
        )
        names = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else []
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        names = []
    return [str(n) for n in names] or ["unknown (the GPU could not be named)"]


def reuse_key(inputs: Any, fmt: Any, settings_key: str, code: Any, environment: Any) -> str | None:
    """The identity of one judging (None where a part is unrecorded: never reused)."""
    if not (isinstance(inputs, dict) and isinstance(environment, dict) and code and fmt):
        return None
    parts = [inputs, fmt, settings_key, code, environment]
    return sha256_hex(json.dumps(parts, sort_keys=True).encode())
