"""STATIC-FOREIGN-STATE: reading state the candidate does not own.

A candidate that finds the reference's module, the judge's objects, or its caller's frame
can copy the expected answer instead of computing it, or learn that it is being judged.
Caught: ``sys.modules``, ``gc.get_objects`` / ``get_referrers`` / ``get_referents``,
``inspect.stack`` / ``currentframe`` / ``getouterframes`` / ``getmembers`` of a frame,
``sys._getframe``, frame attributes (``f_back``, ``f_globals``, ``f_locals``), and
imports of ``kernelgate``, ``__main__`` or a ``reference`` module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelgate.static.base import Hit, Rule, StaticContext

FOREIGN_CALLS = frozenset(
    {
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "inspect.stack",
        "inspect.currentframe",
        "inspect.getouterframes",
        "inspect.trace",
        "sys._getframe",
    }
)
FOREIGN_ATTRIBUTES = frozenset({"sys.modules"})
FRAME_ATTRIBUTES = frozenset({"f_back", "f_globals", "f_locals", "tb_frame"})
FOREIGN_MODULES = ("kernelgate", "__main__", "reference")


class ForeignStateRule(Rule):
    id = "STATIC-FOREIGN-STATE"
    title = "reading another module's state (the reference, the judge, sys.modules, frames)"

    def check(self, ctx: StaticContext) -> Iterator[Hit]:
        for source in ctx.files:
            for node in source.nodes:
                message = None
                if isinstance(node, ast.Call) and source.qualified(node.func) in FOREIGN_CALLS:
                    message = f"calls `{source.qualified(node.func)}`"
                elif isinstance(node, ast.Attribute):
                    name = source.qualified(node)
                    if name in FOREIGN_ATTRIBUTES:
                        message = f"reads `{name}`"
                    elif node.attr in FRAME_ATTRIBUTES:
                        message = f"reads a frame's `{node.attr}`"
                elif isinstance(node, ast.Import | ast.ImportFrom):
                    modules = (
                        [a.name for a in node.names]
                        if isinstance(node, ast.Import)
                        else [node.module or ""]
                    )
                    for module in modules:
                        if module.split(".")[0] in FOREIGN_MODULES:
                            message = f"imports `{module}`"
                if message:
                    yield self.hit(source, node, message)
