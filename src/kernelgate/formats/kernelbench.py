"""KernelBench programs: a reference (``Model``, ``get_inputs``, ``get_init_inputs``) and a
candidate defining ``ModelNew``.

The reference is trusted and runs in the judge. The candidate is hostile: here it is only
parsed (``ast``), never executed; the worker imports it.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.util
import itertools
import random
import sys
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kernelgate.errors import CandidateLoadError, ReferenceError_

KERNELBENCH_SEED = 42


def set_seed(seed: int) -> None:
    """Seed every generator the way KernelBench's harness does before building models."""
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def _read_source(path: Path, role: str, error: type[Exception]) -> str:
    if not path.is_file():
        raise error(f"{role} file not found: {path}")
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise error(f"cannot read {role} file {path}: {exc}") from None


def _parse(source: str, path: Path, role: str, error: type[Exception]) -> ast.Module:
    try:
        return ast.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise error(f"{role} {path} has a syntax error at line {exc.lineno}: {exc.msg}") from None


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def candidate_backend(source: str) -> str:
    """What the candidate is written in: "cuda" (C++ extension), "triton" or "torch"."""
    if "load_inline" in source or "cpp_extension" in source or "RawKernel" in source:
        return "cuda"
    if "triton" in source:
        return "triton"
    return "torch"


def check_candidate_source(path: str | Path, class_name: str = "ModelNew") -> str:
    """Parse a candidate without running it; return its source or raise CandidateLoadError.
    ``class_name``: what it must define (a problem folder's solution defines ``Model``)."""
    path = Path(path)
    source = _read_source(path, "candidate", CandidateLoadError)
    tree = _parse(source, path, "candidate", CandidateLoadError)
    if class_name != "ModelNew" and class_name not in _top_level_names(tree):
        raise CandidateLoadError(
            f"solution {path} defines no top-level `{class_name}`; a problem folder's "
            f"solution must define `class {class_name}(nn.Module)` with the reference's "
            "constructor"
        )
    if class_name == "ModelNew" and "ModelNew" not in _top_level_names(tree):
        raise CandidateLoadError(
            f"candidate {path} defines no top-level `ModelNew`; a KernelBench candidate must "
            "define `class ModelNew(nn.Module)` with the reference Model's constructor"
        )
    return source


@dataclass(frozen=True)
class Footprint:
    """A reference case's size: tensor elements held (parameters, buffers, inputs, outputs)
    and floating-point operations in ``forward`` (matmuls and convolutions, as PyTorch's
    ``FlopCounterMode`` counts them). ``work_elements``: the most elements of tensors that
    ``forward`` made (intermediates and outputs) alive at once. Sizes are admitted by
    ``elements`` alone; the audit's device-memory estimate adds ``work_elements``, which a
    deep network needs far beyond its inputs and outputs (CUDA-L1 h100 L2/T96 held 3,300
    bytes of device memory per input and output element)."""

    elements: int
    flops: int
    work_elements: int = 0


class LiveElements(TorchDispatchMode):
    """Counts the elements of the tensors computed under it that are alive at once, peak
    kept in ``peak``. An output that aliases an input (a view, an in-place op) is not new
    memory and is not counted; a counted tensor stops counting when it is freed (a weak
    reference), as the caching allocator would reuse its memory."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0

    def _freed(self, elements: int) -> None:
        self.live -= elements

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        with contextlib.suppress(Exception):  # a count it cannot make must not change `out`
            self._count(func, out)
        return out

    def _count(self, func: Any, out: Any) -> None:
        returns = getattr(getattr(func, "_schema", None), "returns", ())
        outputs = out if isinstance(out, tuple | list) else (out,)
        for index, tensor in enumerate(outputs):
            if not isinstance(tensor, torch.Tensor):
                continue
            if index < len(returns) and returns[index].alias_info is not None:
                continue  # a view or the input written in place
            elements = tensor.numel()
            self.live += elements
            weakref.finalize(tensor, self._freed, elements)
        self.peak = max(self.peak, self.live)


@dataclass
class ReferenceProgram:
    """A loaded KernelBench reference. ``sizes`` are its module-level integer constants."""

    path: Path
    source: str
    module: ModuleType

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    @property
    def sizes(self) -> dict[str, int]:
        return {
            name: value
            for name, value in vars(self.module).items()
            if not name.startswith("_") and type(value) is int and name.isidentifier()
        }

    @contextlib.contextmanager
    def rebound(self, **sizes: int) -> Iterator[None]:
        """Temporarily rebind module-level sizes, so ``get_inputs`` builds other shapes."""
        saved = {name: getattr(self.module, name) for name in sizes}
        try:
            for name, value in sizes.items():
                setattr(self.module, name, value)
            yield
        finally:
            for name, value in saved.items():
                setattr(self.module, name, value)

    def footprint(self, **sizes: int) -> Footprint | None:
        """What the reference holds and computes at ``sizes``.

        Everything is built on the meta device, which allocates nothing and computes only
        shapes, so a held-out size that would need terabytes or hours (a ``kernel_size`` of
        4096 in a transposed convolution: weights, outputs and work that grow with no input
        tensor) is measured in milliseconds instead of being found by thrashing the host.
        The parts that cannot run there (``.item()`` in ``forward``, an explicit device)
        are left out of the count; None when not even the model can be built there.
        """
        # Imported here: it imports Triton, and the worker (which imports this module) must
        # fork its offline compiler before Triton loads (sandbox.resources.CompileServer).
        from torch.utils.flop_counter import FlopCounterMode

        with self.rebound(**sizes), torch.device("meta"), torch.no_grad():
            try:
                model = self.module.Model(*self.module.get_init_inputs())
            except Exception:
                return None
            held = itertools.chain(model.parameters(), model.buffers())
            elements = sum(t.numel() for t in held)
            counter, live = FlopCounterMode(display=False), LiveElements()
            try:
                inputs = list(self.module.get_inputs())
                elements += _elements(inputs)
                with counter, live:
                    elements += _elements(model(*inputs))
            except Exception:
                pass
        return Footprint(elements, counter.get_total_flops(), live.peak)

    def init_inputs(self) -> list[Any]:
        set_seed(KERNELBENCH_SEED)
        return list(self.module.get_init_inputs())

    def build_model(self, init_inputs: list[Any]) -> torch.nn.Module:
        set_seed(KERNELBENCH_SEED)
        return self.module.Model(*init_inputs)

    def inputs(self, seed: int) -> list[Any]:
        set_seed(seed)
        return list(self.module.get_inputs())


def _elements(value: Any) -> int:
    """Tensor elements in ``value`` (nested lists, tuples and dicts too)."""
    if isinstance(value, torch.Tensor):
        return value.numel()
    if isinstance(value, list | tuple):
        return sum(_elements(v) for v in value)
    if isinstance(value, dict):
        return sum(_elements(v) for v in value.values())
    return 0


def load_reference(path: str | Path) -> ReferenceProgram:
    """Import a KernelBench reference in the judge (it is trusted) and check its shape."""
    path = Path(path)
    source = _read_source(path, "reference", ReferenceError_)
    tree = _parse(source, path, "reference", ReferenceError_)
    missing = {"Model", "get_inputs", "get_init_inputs"} - _top_level_names(tree)
    if missing:
        raise ReferenceError_(
            f"reference {path} lacks {', '.join(sorted(missing))}; a KernelBench reference "
            "defines `Model`, `get_inputs()` and `get_init_inputs()`"
        )
    name = f"kernelgate_reference_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise ReferenceError_(
            f"reference {path} failed to import: {type(exc).__name__}: {exc}"
        ) from None
    return ReferenceProgram(path=path, source=source, module=module)
