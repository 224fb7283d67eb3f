"""STATIC-BACKEND: a process-wide backend switch, and whether it is put back.

A switch such as ``cudnn.benchmark``, ``allow_tf32``, flush-to-zero
(``torch.set_flush_denormal``) or deterministic algorithms changes every later
computation in the process, the reference's included when both share one: the candidate is
then judged and timed against a reference it has altered. Caught: assignments to
``torch.backends.*`` flags and calls to ``torch.set_flush_denormal``,
``torch.use_deterministic_algorithms``, ``torch.set_float32_matmul_precision`` and
``torch.set_default_dtype``. The message says whether the same function puts the switch
back in a ``finally`` block (restored: the switch holds during the call only) or not.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelgate.static.base import Hit, Rule, StaticContext
from kernelgate.static.sources import SourceFile

SWITCH_CALLS = frozenset(
    {
        "torch.set_flush_denormal",
        "torch.use_deterministic_algorithms",
        "torch.set_float32_matmul_precision",
        "torch.set_default_dtype",
        "torch.set_deterministic_debug_mode",
    }
)


def _switch(source: SourceFile, node: ast.AST) -> str | None:
    """The switch ``node`` sets (its dotted name), or None."""
    if isinstance(node, ast.Assign | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            name = source.qualified(target)
            if name and name.startswith("torch.backends."):
                return name
    if isinstance(node, ast.Call):
        name = source.qualified(node.func)
        if name in SWITCH_CALLS:
            return name
    return None


def _restored_in_finally(source: SourceFile, scope: ast.AST, switch: str) -> bool:
    for node in ast.walk(scope):
        if isinstance(node, ast.Try) and node.finalbody:
            for statement in node.finalbody:
                if any(_switch(source, inner) == switch for inner in ast.walk(statement)):
                    return True
    return False


class BackendSwitchRule(Rule):
    id = "STATIC-BACKEND"
    title = "a process-wide backend switch (cudnn.benchmark, TF32, flush-denormal, ...)"

    def check(self, ctx: StaticContext) -> Iterator[Hit]:
        for source in ctx.files:
            for node in source.nodes:
                switch = _switch(source, node)
                if switch is None:
                    continue
                scope = source.enclosing_function(node)
                in_finally = any(
                    isinstance(p, ast.Try) and node in list(_walk_all(p.finalbody))
                    for p in ast.walk(scope)
                )
                if in_finally:
                    continue  # the restoring assignment itself
                restored = _restored_in_finally(source, scope, switch)
                yield self.hit(
                    source,
                    node,
                    f"sets `{switch}`: "
                    + (
                        "restored in a finally block of the same function"
                        if restored
                        else "not restored (holds for everything that runs after the call)"
                    ),
                )


def _walk_all(statements: list[ast.stmt]) -> Iterator[ast.AST]:
    for statement in statements:
        yield from ast.walk(statement)
