"""Test set-up: the Triton interpreter on CPU-only machines, and the ``gpu`` marker."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import torch

if not torch.cuda.is_available():
    # Must be set before any @triton.jit function is defined (kernels in src/ and tests/).
    os.environ.setdefault("TRITON_INTERPRET", "1")

ROOT = Path(__file__).resolve().parents[1]
SOFTMAX = ROOT / "examples" / "softmax"
DATA = Path(__file__).resolve().parent / "data"


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` as a module (benchmarks are scripts, not a package), run
    afresh at each call. It is entered in ``sys.modules`` (as ``benchmark_<name>``) before
    it runs: a dataclass looks its module up there while it is built."""
    spec = importlib.util.spec_from_file_location(
        f"benchmark_{name}", ROOT / "benchmarks" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (run through the device tool)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def softmax_reference() -> Path:
    return SOFTMAX / "reference.py"


def kernelgate(
    *args: str, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the CLI as a user would, in its own process, 200 columns wide (rich would
    otherwise wrap tables and messages at 80 under a pipe)."""
    return subprocess.run(
        [sys.executable, "-m", "kernelgate.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        check=False,
    )


AUDIT_TIMEOUT = "2"  # --timeout of the audit tests: the hanging candidate stays cheap


def audit_command(corpus: Path, out: Path, *options: str) -> list[str]:
    """``kernelgate audit`` of ``corpus`` into ``out``, complete, at the audit tests' call
    and compile timeouts, plus ``options``."""
    return [
        "audit",
        str(corpus),
        "--out",
        str(out),
        "--timeout",
        AUDIT_TIMEOUT,
        "--compile-timeout",
        AUDIT_TIMEOUT,
        *options,
    ]


def once_per_run(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    """A folder for what ``name`` builds once in this test run, shared by its xdist workers
    (their base temporary folders have one parent, of this run only); a folder of this
    session's own without xdist. Build it under ``FileLock(folder + ".lock")`` unless it
    holds ``DONE``."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # the parent holds earlier runs' folders
        return tmp_path_factory.getbasetemp() / name
    return tmp_path_factory.getbasetemp().parent / name


DONE = "built"  # written last into a ``once_per_run`` folder, when what it holds is complete


@pytest.fixture(scope="session")
def two_record_audit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One complete audit, every gate, of an honest record and a NaN swallower (a pairs
    corpus, --timeout 2, two workers), judged once a test run (the first xdist worker that
    needs it judges it; the others wait for it and read it): the folder holding its
    ``corpus`` and ``out``. Several tests start from such an audit; they take a copy
    (``copy_audit``) to change, as an audit folder is carried between machines."""
    from filelock import FileLock

    from .audit_corpus import write_pairs

    root = once_per_run(tmp_path_factory, "two-record-audit")
    with FileLock(f"{root}.lock"):
        if not (root / DONE).exists():
            shutil.rmtree(root, ignore_errors=True)  # a worker that failed building it
            corpus = write_pairs(root / "corpus", ["honest", "nan_swallow"])
            out = root / "out"
            result = kernelgate(*audit_command(corpus, out, "--workers", "2"), timeout=240)
            assert result.returncode == 0, result.stderr
            (root / DONE).write_text("")
    return root


def copy_audit(audit: Path, destination: Path) -> tuple[Path, Path]:
    """A copy of ``two_record_audit``'s corpus and output folder at ``destination`` (which
    must not exist yet): the corpus and the output folder of the copy."""
    shutil.copytree(audit, destination, symlinks=True, ignore=shutil.ignore_patterns(DONE))
    return destination / "corpus", destination / "out"


def gone(pid: int, limit: float = 5.0) -> bool:
    """Whether ``pid`` is dead within ``limit`` seconds (gone, or a zombie not yet reaped)."""
    deadline = time.monotonic() + limit
    while True:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text(errors="replace")
        except OSError:
            return True
        if stat[stat.rfind(")") + 2] == "Z":
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
