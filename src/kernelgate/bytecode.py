"""A bytecode cache for environments where the installed packages cannot cache their own.

Where ``PYTHONDONTWRITEBYTECODE`` is set (as on this workplace's machines) or site-packages is
read-only, nothing writes ``__pycache__`` next to torch, so every new process compiles torch,
sympy and dynamo from source: 4-5 s for each judge, worker and old-check process, most of a
verification on a fast GPU. kernelgate then keeps bytecode in a folder of its own
(``sys.pycache_prefix`` = ``~/.cache/kernelgate/pycache``) and passes it to its children.
Source trees stay clean, which is what the variable is usually set for; with a prefix of
your own (``PYTHONPYCACHEPREFIX``) or a normal environment nothing changes.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

PREFIX_ENV = "PYTHONPYCACHEPREFIX"


def cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kernelgate" / "pycache"


def _torch_caches_its_own_bytecode() -> bool:
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return True  # nothing heavy to compile
    package = Path(spec.origin).parent
    cache = package / "__pycache__"
    return os.access(cache if cache.is_dir() else package, os.W_OK)


def needs_cache() -> bool:
    """Whether this environment would compile the big packages from source every time."""
    if sys.pycache_prefix is not None:  # PYTHONPYCACHEPREFIX, -X pycache_prefix, or ours
        return False
    return bool(sys.flags.dont_write_bytecode) or not _torch_caches_its_own_bytecode()


def use_cache() -> None:
    """Read and write bytecode under ``cache_folder`` from now on, where it is needed."""
    if needs_cache():
        sys.pycache_prefix = str(cache_folder())
        sys.dont_write_bytecode = False


def child_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` for a kernelgate child process: the same cache, written by the child."""
    if sys.pycache_prefix is not None and PREFIX_ENV not in env:
        env[PREFIX_ENV] = sys.pycache_prefix
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env
