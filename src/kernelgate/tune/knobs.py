"""The launch knobs a candidate offers to the tuner, read from its source (judge side).

The judge never imports candidate code, so the knob space is read from the file's syntax
tree, and only from literals:

* a module-level declaration ``KERNELGATE_KNOBS = {"BLOCK_ROWS": [1, 2, 4], "num_warps":
  [2, 4, 8]}``: each knob a name and a non-empty list of values (int, float, bool, str).
  The candidate reads the values it runs with from the ``KERNELGATE_KNOB_VALUES``
  environment variable (a JSON object; absent outside the tuner, so it falls back to its
  own defaults), which the tuner sets in the worker's environment for each config;
* every ``@triton.autotune(configs=[triton.Config({...}, num_warps=..), ...])`` whose
  configs are a literal list: one knob ``autotune:<kernel>`` whose values are the config
  indices. The worker pins that kernel's autotuner to the one config (``tune/pin.py``),
  so Triton never times anything and the contract judges exactly that config.

Anything else (configs built by a comprehension, knobs computed at import) is not a knob
the judge can see: a clear error says how to declare it.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelgate.errors import KernelgateError

DECLARATION = "KERNELGATE_KNOBS"  # the module-level dict a candidate declares
VALUES_ENV = "KERNELGATE_KNOB_VALUES"  # JSON object of the values a worker runs with
AUTOTUNE_PREFIX = "autotune:"  # knob name of an autotuned kernel's config index
Scalar = int | float | bool | str


@dataclass(frozen=True)
class Knob:
    """One categorical launch knob: its name, its values, and how each value reads."""

    name: str
    values: tuple[Scalar, ...]
    labels: tuple[str, ...] = ()  # autotune: the config each index stands for

    @property
    def autotune_kernel(self) -> str | None:
        """The kernel whose autotuner this knob pins (None: a declared knob)."""
        if self.name.startswith(AUTOTUNE_PREFIX):
            return self.name[len(AUTOTUNE_PREFIX) :]
        return None

    def label(self, index: int) -> str:
        return self.labels[index] if self.labels else repr(self.values[index])


@dataclass(frozen=True)
class KnobSpace:
    """Every knob of one candidate; a config is one value per knob (by index)."""

    knobs: tuple[Knob, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def size(self) -> int:
        total = 1
        for knob in self.knobs:
            total *= len(knob.values)
        return total

    def values_of(self, config: tuple[int, ...]) -> dict[str, Scalar]:
        """The config's knobs by name (autotune knobs as their config index)."""
        return {k.name: k.values[i] for k, i in zip(self.knobs, config)}

    def described(self, config: tuple[int, ...]) -> dict[str, Any]:
        """The config as a reader wants it: declared knobs' values, and each autotuned
        kernel's config index with the ``triton.Config`` it stands for."""
        out: dict[str, Any] = {}
        for knob, index in zip(self.knobs, config):
            if knob.autotune_kernel is None:
                out[knob.name] = knob.values[index]
            else:
                out[knob.name] = {"index": index, "config": knob.label(index)}
        return out

    def declared_values(self, config: tuple[int, ...]) -> dict[str, Scalar]:
        """What goes into ``KERNELGATE_KNOB_VALUES`` (the declared knobs only)."""
        return {
            k.name: k.values[i] for k, i in zip(self.knobs, config) if k.autotune_kernel is None
        }

    def autotune_pins(self, config: tuple[int, ...]) -> dict[str, int]:
        """Kernel name -> the config index its autotuner is pinned to."""
        return {
            kernel: index
            for knob, index in zip(self.knobs, config)
            if (kernel := knob.autotune_kernel) is not None
        }


def knob_space(candidate: str | Path) -> KnobSpace:
    """The knobs ``candidate`` declares or autotunes, read from its source (never run).

    Raises ``KernelgateError`` for a file that does not parse, a malformed declaration, or
    a candidate with no knob at all."""
    path = Path(candidate)
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except (OSError, SyntaxError, ValueError) as exc:
        raise KernelgateError(f"cannot read the candidate {path}: {exc}") from None
    knobs: list[Knob] = []
    notes: list[str] = []
    for node in tree.body:
        value = _declaration(node)
        if value is not None:
            knobs += _declared_knobs(value, path)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                knob = _autotune_knob(decorator, node.name, path, notes)
                if knob is not None:
                    knobs.append(knob)
    names = [k.name for k in knobs]
    if len(set(names)) != len(names):
        raise KernelgateError(f"{path}: knob names repeat: {names}")
    if not knobs:
        raise KernelgateError(
            f"{path} has no knobs to tune: declare a module-level {DECLARATION} = "
            '{"BLOCK": [64, 128], ...} read back from the ' + VALUES_ENV + " environment "
            "variable, or give a kernel @triton.autotune(configs=[...]) with a literal list "
            "(docs/usage.md, Contract-gated tuning)"
            + (f"; seen: {'; '.join(notes)}" if notes else "")
        )
    return KnobSpace(tuple(knobs), tuple(notes))


def _declaration(node: ast.stmt) -> ast.expr | None:
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    named = any(isinstance(t, ast.Name) and t.id == DECLARATION for t in targets)
    return node.value if named and isinstance(node, ast.Assign | ast.AnnAssign) else None


def _declared_knobs(value: ast.expr, path: Path) -> list[Knob]:
    try:
        declared = ast.literal_eval(value)
    except ValueError:
        raise KernelgateError(
            f"{path}: {DECLARATION} must be a literal dict of name -> list of values "
            "(the judge reads it without running the candidate)"
        ) from None
    if not isinstance(declared, dict) or not declared:
        raise KernelgateError(f"{path}: {DECLARATION} must be a non-empty dict")
    knobs = []
    for name, values in declared.items():
        if not isinstance(name, str) or not name or name.startswith(AUTOTUNE_PREFIX):
            raise KernelgateError(f"{path}: {DECLARATION} has a bad knob name {name!r}")
        if not isinstance(values, list | tuple) or not values:
            raise KernelgateError(f"{path}: knob {name!r} needs a non-empty list of values")
        for v in values:
            if not isinstance(v, Scalar) or (isinstance(v, float) and v != v):
                raise KernelgateError(
                    f"{path}: knob {name!r} has value {v!r}: only int, float, bool, str"
                )
        if len(set(map(json.dumps, values))) != len(values):
            raise KernelgateError(f"{path}: knob {name!r} repeats a value: {list(values)}")
        knobs.append(Knob(name, tuple(values)))
    return knobs


def _is_call_to(node: ast.expr, name: str) -> bool:
    func = node.func if isinstance(node, ast.Call) else None
    return (isinstance(func, ast.Attribute) and func.attr == name) or (
        isinstance(func, ast.Name) and func.id == name
    )


def _autotune_knob(decorator: ast.expr, kernel: str, path: Path, notes: list[str]) -> Knob | None:
    """The ``autotune:<kernel>`` knob of one ``@triton.autotune(...)`` decorator."""
    if not isinstance(decorator, ast.Call) or not _is_call_to(decorator, "autotune"):
        return None
    configs = next((k.value for k in decorator.keywords if k.arg == "configs"), None)
    if configs is None and decorator.args:
        configs = decorator.args[0]
    if not isinstance(configs, ast.List | ast.Tuple):
        notes.append(f"{kernel}: autotune configs are not a literal list")
        return None
    labels = []
    for element in configs.elts:
        label = _config_label(element)
        if label is None:
            notes.append(f"{kernel}: an autotune config is not a literal triton.Config")
            return None
        labels.append(label)
    if not labels:
        return None
    return Knob(AUTOTUNE_PREFIX + kernel, tuple(range(len(labels))), tuple(labels))


def _config_label(node: ast.expr) -> str | None:
    """``triton.Config({"BLOCK": 128}, num_warps=4)`` as ``BLOCK=128, num_warps=4``."""
    if not isinstance(node, ast.Call) or not _is_call_to(node, "Config"):
        return None
    parts = []
    try:
        if node.args:
            kwargs = ast.literal_eval(node.args[0])
            if not isinstance(kwargs, dict):
                return None
            parts += [f"{k}={v!r}" for k, v in kwargs.items()]
        for keyword in node.keywords:
            if keyword.arg is not None and keyword.arg != "pre_hook":
                parts.append(f"{keyword.arg}={ast.literal_eval(keyword.value)!r}")
    except ValueError:
        return None
    return ", ".join(parts)
