"""STATIC-CACHE: results or state keyed by a tensor's shape, address or identity.

A cache keyed by ``x.shape``, ``x.data_ptr()`` or ``id(x)`` answers a new input that
shares the key with the answer of an old one: a benchmark that reuses its input tensors
sees a fast kernel, and a judge that changes the values in place sees stale results
(ORD-02 and MEM-01 look for it at run time). Caught: a subscript, ``in`` test or
``.get``/``.setdefault``/``.pop`` whose key is built from ``.shape``, ``.size()``,
``.data_ptr()``, ``.storage()`` or ``id(...)`` (directly or through a variable of the same
function); and a method that assigns ``self.X`` under a test of ``self.X`` and then returns
``self.X`` itself (an output computed once and handed back on every later call).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelgate.static.base import Hit, Rule, StaticContext
from kernelgate.static.sources import SourceFile

KEY_ATTRIBUTES = frozenset({"shape"})
KEY_METHODS = frozenset({"size", "data_ptr", "storage", "untyped_storage", "stride"})
LITERALS = (ast.Tuple, ast.List, ast.Set, ast.Constant)
LOOKUPS = frozenset({"get", "setdefault", "pop", "__getitem__", "__contains__"})


def _identity_part(node: ast.AST) -> str | None:
    for inner in ast.walk(node):
        if isinstance(inner, ast.Attribute) and inner.attr in KEY_ATTRIBUTES:
            return f".{inner.attr}"
        if isinstance(inner, ast.Call):
            if isinstance(inner.func, ast.Attribute) and inner.func.attr in KEY_METHODS:
                return f".{inner.func.attr}()"
            if isinstance(inner.func, ast.Name) and inner.func.id == "id":
                return "id()"
    return None


def _keyed(scope: ast.AST) -> dict[str, str]:
    """Variables of ``scope`` assigned a value built from a shape / address / identity."""
    keyed: dict[str, str] = {}
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            part = _identity_part(node.value)
            if part and isinstance(target, ast.Name):
                keyed[target.id] = part
    return keyed


def _key_of(node: ast.AST, keyed: dict[str, str]) -> str | None:
    if isinstance(node, ast.Name) and node.id in keyed:
        return keyed[node.id]
    return _identity_part(node)


class IdentityCacheRule(Rule):
    id = "STATIC-CACHE"
    title = "caching keyed by shape, data_ptr or id; an output computed once and returned again"

    def check(self, ctx: StaticContext) -> Iterator[Hit]:
        for source in ctx.files:
            yield from self._keyed_lookups(source)
            yield from self._returned_once(source)

    def _keyed_lookups(self, source: SourceFile) -> Iterator[Hit]:
        scopes = [n for n in source.nodes if isinstance(n, ast.FunctionDef)]
        seen: set[int] = set()
        for scope in scopes:
            keyed = _keyed(scope)
            for node in ast.walk(scope):
                key: str | None = None
                if isinstance(node, ast.Subscript):
                    # x.shape[0] reads a shape and buf[:n] slices a tensor: neither is a lookup
                    is_shape = isinstance(node.value, ast.Attribute) and node.value.attr == "shape"
                    sliced = any(isinstance(n, ast.Slice) for n in ast.walk(node.slice))
                    if _is_container(node.value) and not is_shape and not sliced:
                        key = _key_of(node.slice, keyed)
                elif (
                    isinstance(node, ast.Compare)
                    and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
                    and not isinstance(node.comparators[0], LITERALS)
                ):
                    key = _key_of(node.left, keyed)
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr in LOOKUPS
                    and node.args
                ):
                    key = _key_of(node.args[0], keyed)
                if key and node.lineno not in seen:
                    seen.add(node.lineno)
                    yield self.hit(
                        source, node, f"a lookup keyed by {key}: `{ast.unparse(node)[:80]}`"
                    )

    def _returned_once(self, source: SourceFile) -> Iterator[Hit]:
        for function in (n for n in source.nodes if isinstance(n, ast.FunctionDef)):
            if function.name == "__init__":
                continue
            guarded: set[str] = set()
            for node in ast.walk(function):
                if isinstance(node, ast.If):
                    tested = {ast.unparse(n) for n in ast.walk(node.test) if _is_self_attr(n)}
                    assigned = {
                        ast.unparse(t)
                        for s in node.body
                        for n in ast.walk(s)
                        if isinstance(n, ast.Assign)
                        for t in n.targets
                        if _is_self_attr(t)
                    }
                    guarded |= tested & assigned
            for node in ast.walk(function):
                if isinstance(node, ast.Return) and node.value is not None:
                    values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                    for value in values:
                        if _is_self_attr(value) and ast.unparse(value) in guarded:
                            yield self.hit(
                                source,
                                node,
                                f"returns `{ast.unparse(value)}`, computed once under a test "
                                "of itself and handed back on later calls",
                            )


def _is_self_attr(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    )


def _is_container(node: ast.AST) -> bool:
    """A subscripted value that can be a cache (a name or attribute, not a call's result)."""
    return isinstance(node, ast.Name | ast.Attribute)
