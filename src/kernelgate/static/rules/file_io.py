"""STATIC-IO: processes, network and files.

A kernel computes from its inputs; one that starts processes, opens sockets or reads and
writes files can fetch answers, leave state for a later run, or reach the judge's files
(the worker's confinement stops most of it at run time: docs/security.md; this rule says
the candidate tried). Caught: imports of ``subprocess``, ``socket``, ``urllib``,
``requests``, ``http``, ``ftplib``, ``multiprocessing``; calls of ``open``, ``os``
process and file operations, ``shutil``, ``tempfile``, ``torch.load`` / ``torch.save``,
``pathlib``'s read/write methods. Not path arithmetic (``os.path.join``), nor
``os.environ`` (build settings), nor ``load_inline`` writing its own build folder.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from kernelgate.static.base import Hit, Rule, StaticContext

MODULES = frozenset(
    {"subprocess", "socket", "urllib", "requests", "http", "ftplib", "multiprocessing"}
    | {"asyncio.subprocess", "paramiko", "httpx", "aiohttp", "pty"}
)
OS_CALLS = frozenset(
    {"system", "popen", "open", "remove", "unlink", "rmdir", "removedirs", "makedirs", "mkdir"}
    | {"listdir", "scandir", "walk", "rename", "replace", "chmod", "chown", "fork", "kill"}
    | {"killpg", "execv", "execve", "execvp", "execl", "spawnv", "spawnl", "symlink", "link"}
    | {"truncate", "write", "read", "posix_spawn"}
)
PATH_METHODS = frozenset(
    {"read_text", "write_text", "read_bytes", "write_bytes", "unlink", "rmdir", "touch"}
)
CALLS = frozenset({"io.open", "torch.load", "torch.save", "numpy.load", "numpy.save"})


class FileNetworkProcessRule(Rule):
    id = "STATIC-IO"
    title = "subprocess, network or filesystem access"

    def check(self, ctx: StaticContext) -> Iterator[Hit]:
        for source in ctx.files:
            for node in source.nodes:
                message = None
                if isinstance(node, ast.Import | ast.ImportFrom):
                    modules = (
                        [a.name for a in node.names]
                        if isinstance(node, ast.Import)
                        else [node.module or ""]
                    )
                    hits = [m for m in modules if m.split(".")[0] in MODULES or m in MODULES]
                    if hits:
                        message = f"imports `{hits[0]}`"
                elif isinstance(node, ast.Call):
                    name = source.qualified(node.func)
                    func = node.func
                    if (
                        isinstance(func, ast.Name)
                        and func.id == "open"
                        and "open" not in source.aliases
                    ):
                        message = "calls `open()`"
                    elif name and (
                        name in CALLS
                        or name.split(".")[0] in ("shutil", "tempfile")
                        or (
                            name.startswith("os.")
                            and name.split(".")[-1] in OS_CALLS
                            and not name.startswith("os.path.")
                        )
                    ):
                        message = f"calls `{name}`"
                    elif (
                        isinstance(func, ast.Attribute)
                        and func.attr in PATH_METHODS
                        and name is None
                    ):
                        message = f"calls `.{func.attr}()` (a pathlib file operation)"
                if message:
                    yield self.hit(source, node, message)
