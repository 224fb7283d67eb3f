"""STATIC-TIMING: a path chosen by a clock reading.

A kernel whose behaviour depends on how long something took behaves differently under a
judge's load, a profiler, or a patched clock than in the benchmark that accepted it (the
kernel verified is not the kernel timed). Caught: a value read from ``time.time``,
``perf_counter``, ``monotonic``, ``process_time`` (and their ``_ns`` forms),
``timeit``, or an event's ``elapsed_time`` that reaches, through assignments in the same
function, the test of an ``if``/``while``/conditional expression/``assert``, a comparison,
or ``min``/``max``/``sorted`` (choosing the fastest). A clock read that only logs is not.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelgate.static.base import Hit, Rule, StaticContext
from kernelgate.static.sources import SourceFile

CLOCKS = frozenset(
    f"time.{name}{suffix}"
    for name in ("time", "perf_counter", "monotonic", "process_time", "thread_time")
    for suffix in ("", "_ns")
) | {"timeit.default_timer", "timeit.timeit", "timeit.repeat"}
CHOOSERS = frozenset({"min", "max", "sorted"})


def _is_clock(source: SourceFile, node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    if source.qualified(node.func) in CLOCKS:
        return True
    return isinstance(node.func, ast.Attribute) and node.func.attr == "elapsed_time"


def _target_keys(target: ast.AST) -> Iterator[str]:
    """The names an assignment target binds, as text (``t``, ``self.best``, ``times``)."""
    if isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _target_keys(element)
    elif isinstance(target, ast.Subscript):
        yield from _target_keys(target.value)
    elif isinstance(target, ast.Name | ast.Attribute):
        yield ast.unparse(target)


def _mentions(source: SourceFile, node: ast.AST, tainted: set[str]) -> bool:
    for inner in ast.walk(node):
        if _is_clock(source, inner):
            return True
        if isinstance(inner, ast.Name | ast.Attribute) and ast.unparse(inner) in tainted:
            return True
    return False


def _tainted_names(source: SourceFile, scope: ast.AST) -> set[str]:
    """Names that hold a clock reading (or something computed from one) in ``scope``."""
    tainted: set[str] = set()
    changed = True
    while changed:
        changed = False
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign) and node.value:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                if _mentions(source, node.value, tainted):
                    for key in (k for t in targets for k in _target_keys(t)):
                        if key not in tainted:
                            tainted.add(key)
                            changed = True
    return tainted


def _none_test(node: ast.Compare) -> bool:
    return all(isinstance(op, ast.Is | ast.IsNot) for op in node.ops) and any(
        isinstance(c, ast.Constant) and c.value is None for c in node.comparators
    )


class TimingBranchRule(Rule):
    id = "STATIC-TIMING"
    title = "a branch, comparison or choice that depends on a clock reading"

    def check(self, ctx: StaticContext) -> Iterator[Hit]:
        for source in ctx.files:
            if not any(_is_clock(source, n) for n in source.nodes):
                continue
            tainted = _tainted_names(source, source.tree)
            seen: set[int] = set()
            for node in source.nodes:
                decisive: ast.AST | None = None
                if isinstance(node, ast.If | ast.While | ast.IfExp | ast.Assert):
                    decisive = node.test
                elif (isinstance(node, ast.Compare) and not _none_test(node)) or (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in CHOOSERS
                ):
                    decisive = node
                if isinstance(decisive, ast.Compare) and _none_test(decisive):
                    continue  # `self.best is None`: whether a choice was made, not which
                if decisive is None or node.lineno in seen:
                    continue
                if _mentions(source, decisive, tainted):
                    seen.add(node.lineno)
                    yield self.hit(
                        source,
                        node,
                        "the path taken depends on a clock reading "
                        f"(`{ast.unparse(decisive)[:80]}`)",
                    )
