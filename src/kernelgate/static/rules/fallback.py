"""STATIC-FALLBACK: an exception handler that computes the answer another way.

``try: return my_kernel(x) except Exception: return torch.softmax(x, -1)`` passes every
correctness check whether or not the kernel works: the judge verifies PyTorch. Caught: an
``except`` block that calls a ``torch`` function (other than device bookkeeping under
``torch.cuda``, dtypes and devices), multiplies matrices (``@``), or calls a reference
(``Model``, ``reference``, ``super().forward``). A handler that re-raises, logs, or sets
a flag is not a fallback; nor is ``except ImportError`` around an optional import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelgate.static.base import Hit, Rule, StaticContext
from kernelgate.static.sources import SourceFile

NOT_COMPUTE_PREFIXES = ("torch.cuda.", "torch.device", "torch.dtype", "torch.backends.")
REFERENCE_NAMES = frozenset({"Model", "reference", "ref", "reference_forward"})


def _computes(source: SourceFile, handler: ast.ExceptHandler) -> str | None:
    for node in (n for s in handler.body for n in ast.walk(s)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            return "a matrix product"
        if not isinstance(node, ast.Call):
            continue
        name = source.qualified(node.func)
        if name and name.startswith("torch.") and not name.startswith(NOT_COMPUTE_PREFIXES):
            return f"`{name}`"
        if isinstance(node.func, ast.Name) and node.func.id in REFERENCE_NAMES:
            return f"the reference `{node.func.id}`"
        if (
            isinstance(node.func, ast.Attribute)
            and node.func.attr == "forward"
            and isinstance(node.func.value, ast.Call)
            and isinstance(node.func.value.func, ast.Name)
            and node.func.value.func.id == "super"
        ):
            return "the parent module's `forward`"
    return None


def _only_import_errors(handler: ast.ExceptHandler) -> bool:
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return all(
        isinstance(n, ast.Name) and n.id in ("ImportError", "ModuleNotFoundError") for n in names
    )


class FallbackRule(Rule):
    id = "STATIC-FALLBACK"
    title = "try/except whose handler computes with torch ops or the reference"

    def check(self, ctx: StaticContext) -> Iterator[Hit]:
        for source in ctx.files:
            for node in source.nodes:
                if not isinstance(node, ast.ExceptHandler):
                    continue
                if node.type is not None and _only_import_errors(node):
                    continue
                what = _computes(source, node)
                if what:
                    yield self.hit(
                        source,
                        node,
                        f"when the code above fails, the handler computes with {what} instead",
                    )
