"""FORBID-01 (static half): a use of a callable or module the problem forbids.

A problem may forbid names (``torch.topk``, ``fla.ops.kda``): the point of the problem is
to write that computation. A forbidden name matches itself and everything under it
(forbidding ``fla.ops.kda`` forbids ``fla.ops.kda.chunk_kda``). Caught statically: imports
(``import fla.ops.kda``, ``from torch import topk as t``), attribute chains resolved through
the imports (``torch.topk``, ``F.x`` with ``F`` an alias), ``getattr`` with a constant
string, ``importlib.import_module`` / ``__import__`` with a constant, and, for a forbidden
``torch.X``, a method call ``.X(...)`` (``x.topk(k)`` is ``torch.topk`` on a tensor).
Hard by nature: a use rejects. Not caught here: a name built at run time (``getattr(torch,
"to" + "pk")``); the worker's dynamic half (torch function and dispatch calls, module
imports during calls) is the answer to that, and takes the same forbidden list
(``StaticContext.forbidden``, the verdict's ``rules`` entry for FORBID-01).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelgate.static.base import Hit, Rule, StaticContext
from kernelgate.static.sources import SourceFile

IMPORTERS = frozenset({"importlib.import_module", "__import__"})


def forbidden_match(name: str, forbidden: tuple[str, ...]) -> str | None:
    """The forbidden entry ``name`` falls under (itself or a parent), or None."""
    for entry in forbidden:
        if name == entry or name.startswith(entry + "."):
            return entry
    return None


def _names_used(source: SourceFile) -> Iterator[tuple[ast.AST, str, str]]:
    """(node, dotted name, how) for every name a file uses that can be resolved."""
    for node in source.nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node, alias.name, "imports"
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node, node.module, "imports"
            for alias in node.names:
                yield node, f"{node.module}.{alias.name}", "imports"
        elif isinstance(node, ast.Attribute) and not isinstance(
            source.parents.get(node), ast.Attribute
        ):
            name = source.qualified(node)
            if name:
                yield node, name, "uses"
        elif isinstance(node, ast.Call):
            name = source.qualified(node) or ""
            if name and isinstance(node.func, ast.Name) and node.func.id == "getattr":
                yield node, name, "uses (getattr)"
            func_name = source.qualified(node.func) or (
                node.func.id if isinstance(node.func, ast.Name) else None
            )
            if (
                func_name in IMPORTERS
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                yield node, node.args[0].value, "imports (by name)"
        elif isinstance(node, ast.Name):
            name = source.aliases.get(node.id)
            if name and not isinstance(source.parents.get(node), ast.Attribute):
                yield node, name, "uses"


class ForbiddenNameRule(Rule):
    id = "FORBID-01"
    title = "a use of a callable or module the problem forbids (static half)"
    hard_by_nature = True

    def check(self, ctx: StaticContext) -> Iterator[Hit]:
        if not ctx.forbidden:
            return
        methods = {
            entry.split(".")[-1]: entry
            for entry in ctx.forbidden
            if entry.startswith("torch.") and entry.count(".") == 1
        }
        for source in ctx.files:
            seen: set[tuple[int, str]] = set()
            for node, name, how in _names_used(source):
                entry = forbidden_match(name, ctx.forbidden)
                if entry and (node.lineno, entry) not in seen:
                    seen.add((node.lineno, entry))
                    yield self.hit(source, node, f"{how} `{name}`: forbidden (`{entry}`)")
            for node, name in source.calls():
                func = node.func
                if (
                    name is None
                    and isinstance(func, ast.Attribute)
                    and func.attr in methods
                    and (node.lineno, methods[func.attr]) not in seen
                ):
                    seen.add((node.lineno, methods[func.attr]))
                    yield self.hit(
                        source,
                        node,
                        f"calls `.{func.attr}()`: the tensor method of forbidden "
                        f"`{methods[func.attr]}`",
                    )
