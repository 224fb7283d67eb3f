"""FORBID-01's dynamic half (worker side): forbidden torch calls and imports, seen as they run.

The static half (``static/rules/forbidden.py``) reads names in the candidate's source; a
name built at run time (``getattr(torch, "to" + "pk")``, ``importlib.import_module(s)``)
escapes it. Here the worker watches what actually runs while candidate code does (the
module's import and ``Model(*init)`` at load, ``construct``, each ``forward``):

* torch calls, through a ``TorchFunctionMode``: ``torch.topk``, ``x.topk`` (a tensor
  method counts as the ``torch.`` function of the same name, as in the static half),
  ``torch.nn.functional.*``, ``torch.ops.aten.*``; also matched by identity with the
  object the forbidden name resolves to, so an alias (``torch._C._VariableFunctions.topk``)
  is the same use;
* aten operators, through a ``TorchDispatchMode``, installed only when a forbidden name is
  an aten operator (``torch.topk`` -> ``aten.topk``): that layer sees ops a candidate
  reaches with the torch-function layer disabled, or through any Python path at all;
* imports: a ``sys.meta_path`` finder (a module's first load), a wrapper of
  ``builtins.__import__`` and ``importlib.import_module`` (every import statement, cached
  modules included; ``from torch import topk`` is a use of ``torch.topk``), and a check of
  ``sys.modules`` after each watched window where it changed size (modules loaded by any
  other means).

A use is recorded with its call site: the innermost frame of a candidate file (a file of
the candidate's folder), ``file:line`` relative to that folder as the static half reports
it. Only names and sites go back to the judge, at most ``MAX_USES`` distinct ones, strings
cut to ``MAX_TEXT``. A watch that candidate code removed (a mode popped or left pushed
above ours) is itself reported, as a use of ``(watch)``: the watch can no longer vouch.

What it cannot see: torch calls on threads the candidate starts (torch's mode stacks are
per thread), a forbidden pure-Python function of a module imported before the candidate
(neither a torch call nor an import), and a candidate that disables both layers with
torch's private switches. Evidence of uses seen, never proof there were none.
"""

from __future__ import annotations

import builtins
import contextlib
import importlib
import importlib.abc
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils._python_dispatch import TorchDispatchMode

# Bound now, before candidate code can patch them.
_getframe = sys._getframe
_real_import = builtins.__import__
_real_import_module = importlib.import_module
_function_mode_stack = torch.overrides._get_current_function_mode_stack
_dispatch_mode_stack = torch.utils._python_dispatch._get_current_dispatch_mode_stack

MAX_USES = 32  # distinct (entry, name, via, where) kept; the reply cannot grow past this
MAX_TEXT = 300
TAMPERED = "(watch)"
# Python operators that are a torch function under another name
OPERATOR_ALIASES = {"__matmul__": "matmul", "__rmatmul__": "matmul", "__imatmul__": "matmul"}
# Namespaces whose functions torch also exports as ``torch.<name>``
TORCH_EXPORTS = ("torch.functional.", "torch._C._VariableFunctions.", "torch._VF.")


def forbidden_match(name: str, forbidden: Sequence[str]) -> str | None:
    """The forbidden entry ``name`` falls under (itself or a parent), or None: the static
    half's rule (``static.rules.forbidden``), kept here so the worker needs no static layer
    (and the static layer, which imports the gates, no sandbox module)."""
    for entry in forbidden:
        if name == entry or name.startswith(entry + "."):
            return entry
    return None


def call_names(func: Any) -> list[str]:
    """The dotted names a torch-function call answers to: torch's own name for it, and the
    public ``torch.<name>`` a tensor method, an aten overload packet or a re-exported
    function stands for (``x.topk`` -> ``torch.topk``, ``aten.topk`` -> ``torch.topk``)."""
    try:
        name = resolve_name(func)
    except Exception:
        name = None
    if not name:
        name = f"{getattr(func, '__module__', None) or '?'}.{getattr(func, '__name__', '?')}"
    short = name.rsplit(".", 1)[-1]
    names = [name]
    if name.startswith("torch.Tensor."):
        names.append("torch." + OPERATOR_ALIASES.get(short, short))
    elif name.startswith("aten."):
        names += ["torch.ops." + name, "torch." + short]
    elif name.startswith(TORCH_EXPORTS):
        names.append("torch." + short)
    elif name.startswith("torch._C._nn."):
        names.append("torch.nn.functional." + short)
    return names


def _resolve(dotted: str) -> Any:
    """The object ``dotted`` names, looked up only through modules already loaded (the
    watch never imports anything on the candidate's behalf); None if it does not resolve."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is None:
            continue
        value: Any = module
        for attr in parts[cut:]:
            value = getattr(value, attr, None)
            if value is None:
                return None
        return value
    return None


def aten_targets(forbidden: Sequence[str]) -> dict[str, str]:
    """aten operator name -> the forbidden entry it stands for (``torch.topk``,
    ``torch.Tensor.topk``, ``aten.topk`` and ``torch.ops.aten.topk`` all give ``topk``)."""
    targets: dict[str, str] = {}
    for entry in forbidden:
        for prefix in ("torch.ops.aten.", "aten.", "torch.Tensor.", "torch."):
            if entry.startswith(prefix):
                short = entry[len(prefix) :]
                if short.isidentifier() and hasattr(torch.ops.aten, short):
                    targets.setdefault(short, entry)
                break
    return targets


class _FunctionWatch(TorchFunctionMode):
    def __init__(self, watch: ForbiddenWatch) -> None:
        super().__init__()
        self.watch = watch

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.watch.on_call(func)
        return func(*args, **(kwargs or {}))


class _DispatchWatch(TorchDispatchMode):
    def __init__(self, watch: ForbiddenWatch) -> None:
        super().__init__()
        self.watch = watch

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.watch.on_aten(func)
        return func(*args, **(kwargs or {}))


# torch wraps every dispatch mode's handler so that its first call imports torch._dynamo
# (hundreds of modules: seconds, or minutes on a loaded host) to keep the handler out of
# compiled graphs. Ours is only ever called by the dispatcher, never traced: it is its own
# "dynamo-disabled" version, and the first watched call costs what the others do.
_handler = _DispatchWatch.__dict__["__torch_dispatch__"]
_raw_handler = getattr(_handler, "__wrapped__", _handler)
_raw_handler.__dynamo_disable = _raw_handler  # type: ignore[attr-defined]


class _ImportFinder(importlib.abc.MetaPathFinder):
    """Sees every module's first load (finds nothing itself: the import goes on)."""

    def __init__(self, watch: ForbiddenWatch) -> None:
        self.watch = watch

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> None:
        self.watch.on_import(fullname, "import (first load)")
        return None


class ForbiddenWatch:
    """The worker's watch over one candidate; ``watching`` marks the windows it records in."""

    def __init__(self, forbidden: Sequence[str], candidate: str, module: str) -> None:
        self.forbidden = tuple(str(f) for f in forbidden)
        self.candidate_dir = os.path.dirname(os.path.abspath(candidate))
        self.module = module  # the name the candidate is imported under
        self.active = False
        self.phase = ""
        self._uses: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self._dropped = 0
        self._verdicts: dict[Any, str | None] = {}  # func -> forbidden entry or None
        self._by_identity: dict[int, str] = {}
        self._aten = aten_targets(self.forbidden)
        self._candidate_code: dict[Any, bool] = {}
        self._installed: tuple[Any, Any, Any] | None = None
        self._modules: set[str] = set()  # in sys.modules at the last check
        self._modules_count = 0

    @property
    def enabled(self) -> bool:
        return bool(self.forbidden)

    # -- installing ---------------------------------------------------------------------
    def install(self) -> None:
        """Put the import hooks in place (they record only inside ``watching``) and resolve
        the forbidden names already importable, before any candidate code runs."""
        if not self.enabled:
            return
        for entry in self.forbidden:
            value = _resolve(entry)
            if value is not None and not isinstance(value, type(sys)):
                self._by_identity[id(value)] = entry
        self._modules = set(sys.modules)
        self._modules_count = len(self._modules)
        resolve_name(torch.add)  # torch builds its name table once: not in a call's time
        sys.meta_path.insert(0, _ImportFinder(self))
        watch = self

        def watched_import(
            name: str,
            globals: Any = None,
            locals: Any = None,
            fromlist: Any = (),
            level: int = 0,
        ) -> Any:
            module = _real_import(name, globals, locals, fromlist, level)
            if watch.active and level == 0:
                watch.on_import(name, "import")
                for item in fromlist or ():
                    if isinstance(item, str) and item != "*":
                        watch.on_import(f"{name}.{item}", "import")
            return module

        def watched_import_module(name: str, package: str | None = None) -> Any:
            module = _real_import_module(name, package)
            if watch.active:
                watch.on_import(getattr(module, "__name__", name), "import (by name)")
            return module

        builtins.__import__ = watched_import
        importlib.import_module = watched_import_module
        self._installed = (sys.meta_path[0], watched_import, watched_import_module)

    def uninstall(self) -> None:
        """Take the import hooks out again (a worker never does: it dies with its
        candidate; a test that watches in its own process does)."""
        if self._installed is None:
            return
        finder, watched_import, watched_import_module = self._installed
        if finder in sys.meta_path:
            sys.meta_path.remove(finder)
        if builtins.__import__ is watched_import:
            builtins.__import__ = _real_import
        if importlib.import_module is watched_import_module:
            importlib.import_module = _real_import_module
        self._installed = None

    @contextlib.contextmanager
    def watching(self, phase: str) -> Iterator[None]:
        """Record forbidden uses while the body (candidate code) runs."""
        if not self.enabled:
            yield
            return
        function_mode = _FunctionWatch(self)
        dispatch_mode = _DispatchWatch(self) if self._aten else None
        self.active, self.phase = True, phase
        function_mode.__enter__()
        if dispatch_mode is not None:
            dispatch_mode.__enter__()
        try:
            yield
        finally:
            self.active = False
            if dispatch_mode is not None:
                self._leave(dispatch_mode, _dispatch_mode_stack, "dispatch")
            self._leave(function_mode, _function_mode_stack, "torch-function")
            self._new_modules()

    def _new_modules(self) -> None:
        """Check the modules loaded since the last window that no import hook reported
        (a set difference done in C, and only when ``sys.modules`` changed size: most calls
        load nothing, and the difference cost more than both modes)."""
        if len(sys.modules) == self._modules_count:
            return
        self._modules_count = len(sys.modules)
        known, reported = self._modules, {key[1] for key in self._uses}
        for name in sys.modules.keys() - known:
            known.add(name)
            if name not in reported:
                self._check(name, "module loaded", "")

    def _leave(self, mode: Any, stack: Any, layer: str) -> None:
        """Pop our mode; a stack the candidate changed is reported (the watch was removed
        or buried under the candidate's own mode) and never an error in the worker."""
        try:
            modes = stack()
            on_top = bool(modes) and modes[-1] is mode
        except Exception:
            on_top = False
        if on_top:
            mode.__exit__(None, None, None)
            return
        self._record(TAMPERED, f"the {layer} watch", "removed by candidate code", "")
        with contextlib.suppress(Exception):
            mode.__exit__(None, None, None)

    # -- what the hooks see -------------------------------------------------------------
    def on_call(self, func: Any) -> None:
        try:
            entry = self._verdicts[func]
        except (KeyError, TypeError):
            entry = self._by_identity.get(id(func))
            name = ""
            if entry is None:
                for name in call_names(func):
                    entry = forbidden_match(name, self.forbidden)
                    if entry:
                        break
            with contextlib.suppress(TypeError):
                self._verdicts[func] = entry
        if entry is not None:
            self._record(entry, call_names(func)[0], "torch call", self._site())

    def on_aten(self, func: Any) -> None:
        if getattr(func, "namespace", None) != "aten":
            return
        entry = self._aten.get(func.overloadpacket.__name__)
        if entry is not None:
            self._record(entry, str(func), "aten op (dispatch)", self._site())

    def on_import(self, name: str, how: str) -> None:
        if self.active:
            self._check(name, how, self._site())

    def _check(self, name: str, how: str, where: str) -> None:
        entry = forbidden_match(name, self.forbidden)
        if entry is not None:
            self._record(entry, name, how, where)

    # -- call sites and the record ------------------------------------------------------
    def _is_candidate(self, frame: Any) -> bool:
        code = frame.f_code
        known = self._candidate_code.get(code)
        if known is None:
            path = code.co_filename
            known = frame.f_globals.get("__name__") == self.module or (
                not path.startswith("<")
                and os.path.dirname(os.path.abspath(path)) == self.candidate_dir
            )
            self._candidate_code[code] = known
        return known

    def _site(self) -> str:
        """``file:line`` of the innermost candidate frame ("" if none is on the stack)."""
        frame = _getframe(1)
        while frame is not None:
            if self._is_candidate(frame):
                path = frame.f_code.co_filename
                shown = os.path.relpath(os.path.abspath(path), self.candidate_dir)
                return f"{shown}:{frame.f_lineno}"
            frame = frame.f_back
        return ""

    def _record(self, entry: str, name: str, via: str, where: str) -> None:
        key = (entry, name, via, where)
        use = self._uses.get(key)
        if use is not None:
            use["count"] += 1
        elif len(self._uses) < MAX_USES:
            self._uses[key] = {
                "entry": entry[:MAX_TEXT],
                "name": name[:MAX_TEXT],
                "via": via,
                "where": where[:MAX_TEXT],
                "phase": self.phase,
                "count": 1,
            }
        else:
            self._dropped += 1

    def drain(self) -> dict[str, Any]:
        """The uses seen since the last drain (``uses``) and how many more were not kept."""
        uses, dropped = list(self._uses.values()), self._dropped
        self._uses, self._dropped = {}, 0
        return {"uses": uses, "dropped": dropped}


# -- the judge's side -------------------------------------------------------------------------

USE_FIELDS = ("entry", "name", "via", "where", "phase")


def parse_uses(node: Any) -> list[dict[str, Any]]:
    """The uses in a worker reply's ``forbidden`` field, checked field by field: raw data
    from a process running hostile code, kept only as bounded strings and counts."""
    if not isinstance(node, dict) or not isinstance(node.get("uses"), list):
        return []
    uses = []
    for raw in node["uses"][:MAX_USES]:
        if not isinstance(raw, dict) or not all(isinstance(raw.get(f), str) for f in USE_FIELDS):
            continue
        count = raw.get("count")
        use: dict[str, Any] = {f: raw[f][:MAX_TEXT] for f in USE_FIELDS}
        use["count"] = count if isinstance(count, int) and not isinstance(count, bool) else 1
        uses.append(use)
    return uses


def merge_uses(into: list[dict[str, Any]], uses: list[dict[str, Any]]) -> None:
    """Add ``uses`` to ``into``: the same use (entry, name, via, where) counted once, at
    most ``MAX_USES`` kept."""
    index = {tuple(u[f] for f in USE_FIELDS[:4]): u for u in into}
    for use in uses:
        key = tuple(use[f] for f in USE_FIELDS[:4])
        if key in index:
            index[key]["count"] += use["count"]
        elif len(into) < MAX_USES:
            into.append(dict(use))
            index[key] = into[-1]
