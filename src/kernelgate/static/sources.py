"""The candidate's files as the static layer sees them: parsed, never imported.

``candidate_files`` starts at the candidate module and follows imports that name a module
in the candidate's own folder (``import helpers``, ``from .kernels import f``), since a
defect moved to a helper file is the same defect. Libraries outside that folder are not
the candidate's code and are not read.

``SourceFile.qualified`` resolves an expression to the dotted name it denotes through the
file's imports: with ``import torch.nn.functional as F``, ``F.softmax`` is
``torch.nn.functional.softmax``; with ``from torch import topk as t``, ``t`` is
``torch.topk``; ``getattr(torch, "topk")`` is ``torch.topk``. A name bound any other way
(an assignment, a parameter) resolves to None: the static layer does not guess at values.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

MAX_FILES = 64  # a candidate folder is a few files; a larger import graph is not followed


@dataclass(eq=False)
class SourceFile:
    path: Path
    text: str
    tree: ast.Module
    # local name -> dotted name it was imported as
    aliases: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.name

    @cached_property
    def nodes(self) -> list[ast.AST]:
        return list(ast.walk(self.tree))

    @cached_property
    def parents(self) -> dict[ast.AST, ast.AST]:
        return {child: node for node in self.nodes for child in ast.iter_child_nodes(node)}

    def enclosing_function(self, node: ast.AST) -> ast.AST:
        """The function (or, at top level, the module) a node belongs to."""
        current = node
        while current in self.parents:
            current = self.parents[current]
            if isinstance(current, ast.FunctionDef | ast.AsyncFunctionDef):
                return current
        return self.tree

    def qualified(self, node: ast.AST) -> str | None:
        """The dotted name ``node`` denotes through the imports, or None."""
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualified(node.value)
            return f"{base}.{node.attr}" if base else None
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            base = self.qualified(node.args[0])
            return f"{base}.{node.args[1].value}" if base else None
        return None

    def calls(self) -> Iterator[tuple[ast.Call, str | None]]:
        """Every call with the dotted name of what it calls (None where unresolved)."""
        for node in self.nodes:
            if isinstance(node, ast.Call):
                yield node, self.qualified(node.func)


def imported_names(tree: ast.Module) -> dict[str, str]:
    """Local name -> dotted name, from every import statement of the file (at any depth)."""
    aliases: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:  # ``import a.b.c`` binds ``a``
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def parse_source(path: Path, text: str) -> SourceFile:
    tree = ast.parse(text, filename=str(path))
    return SourceFile(path=path, text=text, tree=tree, aliases=imported_names(tree))


def _local_module(folder: Path, dotted: str) -> Path | None:
    base = folder.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _local_imports(source: SourceFile, root: Path) -> Iterator[Path]:
    for node in ast.walk(source.tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            folder = source.path.parent if node.level else root
            for _ in range(max(node.level - 1, 0)):
                folder = folder.parent
            module = node.module or ""
            names = [f"{module}.{a.name}".strip(".") for a in node.names] + [module]
            for name in filter(None, names):
                found = _local_module(folder, name)
                if found is not None:
                    yield found
            continue
        for name in names:
            found = _local_module(root, name)
            if found is not None:
                yield found


def candidate_files(candidate: Path, notes: list[str] | None = None) -> list[SourceFile]:
    """The candidate module and the files of its own folder it imports, transitively.

    A file that cannot be read or parsed is left out with a line in ``notes`` (the candidate
    module itself failing to parse is the loader's business, reported there)."""
    root = candidate.resolve().parent
    pending, seen, files = [candidate.resolve()], set(), []
    while pending and len(files) < MAX_FILES:
        path = pending.pop(0)
        if path in seen:
            continue
        seen.add(path)
        try:
            source = parse_source(path, path.read_text(errors="replace"))
        except (OSError, SyntaxError, ValueError) as exc:
            if notes is not None:
                notes.append(f"{path.name}: not analysed ({type(exc).__name__}: {exc})")
            continue
        files.append(source)
        pending += [p.resolve() for p in _local_imports(source, root) if p.resolve() not in seen]
    return files
