"""What the kernel example tests share: loading an example's files, running ``kernelgate
verify`` on them in a process of its own, where the GPU verifies leave their evidence, and
the check of a backward candidate's gradients against its reference's."""

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
import torch

from ._measure import rel_err

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


def assert_verified_on_gpu(reference: Path, candidate: Path, contract: Path, out: Path) -> None:
    """``kernelgate verify --device cuda`` of the example, its evidence written to ``out``:
    the verdict must be "verified" (each gate's status and reason are printed, for the
    device log)."""
    evidence, log = verify(
        str(reference),
        str(candidate),
        "--contract",
        str(contract),
        "--device",
        "cuda",
        str(out),
        timeout=1800,
    )
    summary = {g["id"]: (g["status"], g["reason"]) for g in evidence["gates"]}
    print(json.dumps(summary, indent=1))
    assert evidence["verdict"] == "verified", (summary, log[-3000:])


def assert_gradients_match(
    reference: torch.nn.Module,
    candidate: torch.nn.Module,
    inputs: list[torch.Tensor],
    names: tuple[str, ...],
    grad_of: tuple[int, ...],
    tolerance: float,
) -> None:
    """Every gradient the candidate returns within ``tolerance`` relative error of the
    reference's float64 autograd on the same values, each of the dtype and shape of the
    input it belongs to (``grad_of``, by position); the candidate leaves its inputs
    untouched and returns fresh tensors that do not require grad."""
    before = [x.clone() for x in inputs]
    with torch.no_grad():  # as the judge calls both
        expected = reference(*[x.double() for x in inputs])
        got = candidate(*inputs)
    assert len(got) == len(expected) == len(names)
    errors = {}
    for name, ours, ref, like in zip(names, got, expected, grad_of, strict=True):
        assert ours.dtype == inputs[like].dtype and ours.shape == inputs[like].shape, name
        assert not ours.requires_grad, name
        errors[name] = rel_err(ours, ref)
    bad = {name: e for name, e in errors.items() if not e <= tolerance}
    assert not bad, f"relative errors above {tolerance}: {bad} (all: {errors})"
    for x, y in zip(inputs, before, strict=True):
        assert torch.equal(x, y) and not x.requires_grad
    storages = {x.untyped_storage().data_ptr() for x in inputs}
    assert not storages & {g.untyped_storage().data_ptr() for g in got}
