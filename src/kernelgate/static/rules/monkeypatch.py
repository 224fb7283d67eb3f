"""STATIC-MONKEYPATCH: replacing a function of torch (or of the clock) at run time.

A candidate that assigns ``torch.softmax = mine``, ``torch.Tensor.__add__ = ...`` or
``torch.cuda.Event = Fake`` changes what the reference, the old check's comparison or the
benchmark's timer compute, in every module of the process. Caught: assignment, ``del`` and
``setattr`` on attributes of ``torch`` (``torch.nn.functional``, ``torch.Tensor``, ...)
and of ``time``; not ``torch.backends`` flags (STATIC-BACKEND) nor ``*.config`` settings
(compiler knobs, which change no results).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelgate.static.base import Hit, Rule, StaticContext
from kernelgate.static.sources import SourceFile

PATCHED_ROOTS = ("torch", "time")


def _patched(source: SourceFile, target: ast.AST) -> str | None:
    if not isinstance(target, ast.Attribute):
        return None
    name = source.qualified(target)
    if not name or name.split(".")[0] not in PATCHED_ROOTS:
        return None
    if name.startswith("torch.backends.") or ".config." in name:
        return None
    return name


class MonkeypatchRule(Rule):
    id = "STATIC-MONKEYPATCH"
    title = "assigning attributes of torch, torch.nn.functional, Tensor or the clock"

    def check(self, ctx: StaticContext) -> Iterator[Hit]:
        for source in ctx.files:
            for node in source.nodes:
                targets: list[ast.AST] = []
                if isinstance(node, ast.Assign):
                    targets = list(node.targets)
                elif isinstance(node, ast.AugAssign | ast.AnnAssign | ast.Delete):
                    targets = node.targets if isinstance(node, ast.Delete) else [node.target]
                elif (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Name)
                    and node.func.id in ("setattr", "delattr")
                    and len(node.args) >= 2
                ):
                    base = source.qualified(node.args[0])
                    if base and base.split(".")[0] in PATCHED_ROOTS:
                        attr = node.args[1]
                        label = attr.value if isinstance(attr, ast.Constant) else "<computed>"
                        yield self.hit(source, node, f"{node.func.id} on `{base}` ({label})")
                    continue
                for target in targets:
                    name = _patched(source, target)
                    if name:
                        yield self.hit(source, node, f"replaces `{name}`")
