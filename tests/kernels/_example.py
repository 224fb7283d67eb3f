"""What the GDN example tests share: loading an example's files, running ``kernelgate
verify`` on them in a process of its own, and where the GPU verifies leave their evidence."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The example candidates, by the kernel paths they run: "staged" is the verified default
# (candidate.py), "registers" sets chunk.FORWARD (and, in the backward example,
# chunk.BACKWARD) to the register-resident kernels around each call (candidate_registers.py).
CANDIDATES = {"staged": "candidate.py", "registers": "candidate_registers.py"}


def load(path: Path, name: str) -> ModuleType:
    """The module at ``path`` (examples are files, not packages)."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def verify(*args: str, timeout: float) -> tuple[dict, str]:
    """``kernelgate verify ... --json LAST`` in its own process, from the repository root:
    the evidence written to ``LAST`` and the command's output."""
    out = Path(args[-1])
    done = subprocess.run(
        [sys.executable, "-m", "kernelgate.cli", "verify", *args[:-1], "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )
    assert out.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(out.read_text()), done.stdout + done.stderr


def evidence_folder(names: tuple[str, ...], default: Path) -> Path:
    """The folder named by the first of the environment variables ``names`` that is set (a
    GPU run keeps its evidence there), else ``default``; created if missing."""
    chosen = next((os.environ[n] for n in names if os.environ.get(n)), None)
    folder = Path(chosen) if chosen else default
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextmanager
def counting_calls(
    monkeypatch: pytest.MonkeyPatch, module: ModuleType, names: tuple[str, ...]
) -> Iterator[dict[str, int]]:
    """Counts the calls of each of ``module``'s functions ``names`` (each still runs), so a
    test can tell which kernel path a candidate took."""
    counts = dict.fromkeys(names, 0)
    for name in names:
        original = getattr(module, name)

        def wrapper(*args, _name=name, _original=original, **kwargs):
            counts[_name] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)
    yield counts


def resized_contract(contract: Path, sizes: dict[str, int], out: Path) -> Path:
    """``contract`` with its dims' reference sizes replaced by ``sizes`` (written to
    ``out``): the same inputs, domains and outputs at a size the interpreter judges in
    seconds."""
    text = contract.read_text()
    for name, value in sizes.items():
        text, count = re.subn(
            rf'(name = "{name}"\nreference = )\d+', rf"\g<1>{value}", text, count=1
        )
        assert count == 1, f"{contract} has no dim {name!r} with a reference size"
    out.write_text(text)
    return out
