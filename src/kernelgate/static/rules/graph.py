"""STATIC-GRAPH: CUDA-graph capture, above all one whose static output is returned.

A captured graph replays the kernels it recorded on the addresses it recorded: new inputs
must be copied into its static inputs, and its static output is one buffer, overwritten
by the next replay. A candidate that returns that buffer hands every caller the same
storage (an earlier result changes under the caller's feet), and one that skips the copy
answers old inputs. Caught: ``torch.cuda.graph``, ``torch.cuda.CUDAGraph``,
``torch.cuda.make_graphed_callables`` and ``.replay()``; the message says when a method
returns a ``self`` attribute assigned inside a capture block without a ``.clone()``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelgate.static.base import Hit, Rule, StaticContext
from kernelgate.static.sources import SourceFile

CAPTURE = frozenset(
    {"torch.cuda.graph", "torch.cuda.CUDAGraph", "torch.cuda.make_graphed_callables"}
)


def _captured_attributes(source: SourceFile) -> set[str]:
    """``self.X`` assigned inside a ``with torch.cuda.graph(...)`` block."""
    captured: set[str] = set()
    for node in source.nodes:
        if isinstance(node, ast.With) and any(
            isinstance(item.context_expr, ast.Call)
            and source.qualified(item.context_expr.func) == "torch.cuda.graph"
            for item in node.items
        ):
            for inner in (n for s in node.body for n in ast.walk(s)):
                if isinstance(inner, ast.Assign):
                    captured |= {
                        ast.unparse(t)
                        for t in inner.targets
                        if isinstance(t, ast.Attribute)
                        and isinstance(t.value, ast.Name)
                        and t.value.id == "self"
                    }
    return captured


class CudaGraphRule(Rule):
    id = "STATIC-GRAPH"
    title = "CUDA-graph capture (static outputs handed back, inputs not refreshed)"

    def check(self, ctx: StaticContext) -> Iterator[Hit]:
        for source in ctx.files:
            for node, name in source.calls():
                if name in CAPTURE:
                    yield self.hit(source, node, f"captures a CUDA graph (`{name}`)")
            captured = _captured_attributes(source)
            for node in source.nodes:
                if isinstance(node, ast.Return) and node.value is not None:
                    values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                    for value in values:
                        if ast.unparse(value) in captured:
                            yield self.hit(
                                source,
                                node,
                                f"returns the graph's static output `{ast.unparse(value)}` "
                                "itself (overwritten by the next replay)",
                            )
