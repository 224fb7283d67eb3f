"""What a benchmark's numbers were measured with: versions, code, GPU, date.

One place for the fields every committed result under benchmarks/results/ must carry
(DEVELOPERS.md: device, versions and date), so two scripts that report the same thing say it
the same way. Plain functions of the running process and its checkout: nothing here starts
CUDA (the GPU is described by nvidia-smi), so a script may call them before it forks judges.
"""

from __future__ import annotations

import datetime
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def package_version(package: str) -> str | None:
    """The installed version of ``package``, or None where it is not installed."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def git(*args: str) -> str:
    """``git args`` in this checkout, its output stripped; "unknown" where git cannot say
    (no git, not a checkout: the device's copy of the tree may have a stale .git)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "unknown"


def code_commit() -> str:
    """The checkout's short commit, or "unknown"."""
    return git("rev-parse", "--short", "HEAD")


def gpu_description() -> dict[str, Any]:
    """GPU name and driver from nvidia-smi (no CUDA context in this process), or why not."""
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return {"gpu": None, "driver": None, "gpu_note": f"nvidia-smi not usable: {exc}"}
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or not lines:
        return {"gpu": None, "driver": None, "gpu_note": "nvidia-smi found no GPU"}
    name, _, driver = lines[0].partition(",")
    return {"gpu": name.strip(), "driver": driver.strip(), "gpus_visible": len(lines)}


def now() -> str:
    """The date and time, UTC, to the second (ISO 8601)."""
    return datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
