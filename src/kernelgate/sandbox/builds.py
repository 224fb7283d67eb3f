"""Failed extension builds, remembered across the workers of one candidate.

Many CUDA-L1 candidates build a CUDA extension when they are imported and fall back to
PyTorch when the build fails (sources written for an older CUDA or PyTorch). ninja keeps a
successful build in the candidate's scratch folder, which every worker of one verification
shares, so later workers load it in milliseconds; a failed build leaves nothing behind, and
every fresh worker ran nvcc again: about 20 s on the H200 each time, three or four times a
record (the old check, the main worker, ORD-02's and CMP-01's fresh instances).

``remember_failed_builds`` (installed in the worker before the candidate is imported) keeps
the compiler's output of a failed build in the build folder, keyed by what was built
(``build.ninja`` and the bytes of the sources it names), and a later worker building the same
thing gets the same error at once. The candidate sees what it saw the first time: the same
``RuntimeError`` with the same message. A build killed by a signal or by memory pressure is
not remembered: it might succeed the next time.

The record lives in the candidate's own scratch folder, which the candidate can write: it can
only make its own later builds fail, which it could do anyway.

``report_builds`` makes the same hooks, and one around Triton's compile of a kernel that is
not in its cache, tell the judge when a build starts and ends (``sandbox/compile_budget.py``):
the judge then charges the time to the compile budget instead of the call's deadline.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.abc
import os
import re
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

RECORD_PREFIX = "kernelgate-failed-build-"
EXTENSION_MODULE = "torch.utils.cpp_extension"
TRITON_JIT_MODULE = "triton.runtime.jit"
# Output of a build that may well succeed when tried again (not a compiler's verdict).
TRANSIENT_MARKERS = ("Killed", "killed by signal", "interrupted by", "out of memory", "No space")


def build_key(build_directory: str | Path) -> str | None:
    """A digest of ``build.ninja`` and of every file its build statements name, or None when
    there is no ``build.ninja`` to read (nothing to key on)."""
    folder = Path(build_directory)
    try:
        ninja = (folder / "build.ninja").read_bytes()
    except OSError:
        return None
    digest = hashlib.sha256(ninja)
    for path in sorted(_named_inputs(ninja.decode(errors="replace"), folder)):
        digest.update(path.encode())
        try:
            digest.update(hashlib.sha256(Path(path).read_bytes()).digest())
        except OSError:
            digest.update(b"<unreadable>")
    return digest.hexdigest()[:32]


def _named_inputs(ninja: str, folder: Path) -> set[str]:
    """The sources: paths after the rule name of each ``build OUT: RULE IN...`` statement
    that exist as files and that no statement builds.

    The objects a statement builds are left out even where they exist: a failed build can
    leave some behind (the CUDA object compiled, the C++ one did not), and a key that read
    them differed between the build that failed and every later one. The old check's
    failure was then never replayed in the judge's worker, which compiled the same broken
    extension a second time (13-18 s of nvcc a record in the H200 audit of 2026-12-04)."""
    statements = [
        line.split(":", 1)
        for line in ninja.splitlines()
        if line.startswith("build ") and ":" in line
    ]

    def path_of(token: str) -> str:
        return token if os.path.isabs(token) else str(folder / token)

    built = {path_of(t) for outputs, _ in statements for t in outputs.split()[1:] if t != "|"}
    named: set[str] = set()
    for _, inputs in statements:
        for token in inputs.split()[1:]:
            path = path_of(token)
            if token != "|" and path not in built and os.path.isfile(path):
                named.add(path)
    return named


def remember_failed_builds() -> None:
    """Replay failed builds (``_wrap_build``) from the moment torch's extension builder is
    imported: now if it already is, else when the candidate imports it (importing it here
    would cost every worker setuptools' import, ~0.15 s, most candidates building nothing)."""
    _wrap_when_imported(EXTENSION_MODULE)


# -- build events, for the judge's compile budget --------------------------------------------

_reporter: Callable[[dict[str, Any]], None] | None = None
_reporting = threading.Lock()  # Triton may compile on worker threads (its async mode)


def report_builds(reporter: Callable[[dict[str, Any]], None] | None) -> None:
    """Send ``{"event": "build", "phase": "start" | "end", "what", "ok"}`` to ``reporter``
    around every extension build (torch's ``_jit_compile``) and Triton compile from now on
    (each hooked when its module is imported); None stops reporting."""
    global _reporter
    _reporter = reporter
    if reporter is not None:
        _wrap_when_imported(EXTENSION_MODULE)
        _wrap_when_imported(TRITON_JIT_MODULE)


def _emit(event: dict[str, Any]) -> None:
    reporter = _reporter
    if reporter is None:
        return
    with _reporting, contextlib.suppress(OSError):  # a judge gone away ends the worker anyway
        reporter({"event": "build", **event})


@contextlib.contextmanager
def building(what: str) -> Iterator[None]:
    """Report a build of ``what`` to the judge while the block runs; a failed build also
    says why (``first_error``), so an audit can tell a candidate that fell back to PyTorch
    because its extension does not compile here from one that never had a kernel."""
    _emit({"phase": "start", "what": what})
    ok = False
    error: str | None = None
    try:
        yield
        ok = True
    except BaseException as exc:
        error = first_error(str(exc))
        raise
    finally:
        end: dict[str, Any] = {"phase": "end", "what": what, "ok": ok}
        if error is not None:
            end["error"] = error
        _emit(end)


ERROR_CHARS = 300  # of a failed build's message, sent to the judge
# nvcc's "file.cu(12): error: ...", g++'s "file.cpp:3:5: fatal error: ...", ld's "error:"
COMPILER_ERROR = re.compile(r"(?:[:)]\s*|^)(?:fatal )?error(?: #?\w+-?\w*)?:")


def first_error(message: str) -> str:
    """The compiler's first ``error`` line of a failed build's message (nvcc and g++ print
    ``file:line: error: ...``), else its last non-empty line, cut to ``ERROR_CHARS``."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    chosen = next((line for line in lines if COMPILER_ERROR.search(line)), None)
    if chosen is None:
        chosen = lines[-1] if lines else ""
    return chosen[:ERROR_CHARS]


def _report_calls(owner: Any, attribute: str, what: Callable[[tuple[Any, ...]], str]) -> None:
    """Wrap ``owner.attribute`` once so each call is reported as a build of ``what(args)``
    (nothing to wrap where this version has no such function, or it reports already)."""
    original = getattr(owner, attribute, None)
    if original is None or getattr(original, "_kernelgate_reports", False):
        return

    def reporting(*args: Any, **kwargs: Any) -> Any:
        with building(what(args)):
            return original(*args, **kwargs)

    reporting._kernelgate_reports = True  # type: ignore[attr-defined]
    setattr(owner, attribute, reporting)


def _wrap_jit_compile(cpp_extension: Any) -> None:
    """Report torch's JIT extension builds (``load``, ``load_inline``): the compile, the
    wait for another process building the same folder, and the import of the result."""
    _report_calls(cpp_extension, "_jit_compile", lambda args: f"torch extension {args[0]}")


def _wrap_triton_compile(jit: Any) -> None:
    """Report Triton's compiles of a kernel its in-memory cache does not hold (the disk
    cache's hits go by fast, and are reported all the same)."""
    _report_calls(
        getattr(jit, "JITFunction", None),
        "_do_compile",
        lambda args: f"triton kernel {getattr(args[0], '__name__', '?')}",
    )


def _wrap_when_imported(name: str) -> None:
    """Apply ``_WRAPS[name]`` (each wraps once: installing twice is harmless) now if the
    module is imported, else when it is: reporting is applied only while a reporter is set."""
    module = sys.modules.get(name)
    if module is not None:
        _apply_wraps(name, module)
    elif not any(isinstance(finder, _WrapOnImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _WrapOnImport())


def _apply_wraps(name: str, module: Any) -> None:
    for wrap in _WRAPS.get(name, ()):
        if wrap is _wrap_build or _reporter is not None:
            wrap(module)


class _WrapOnImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when a module of ``_WRAPS`` is imported, it lets the other
    finders load it and wraps its functions once the module has run."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name not in _WRAPS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _WrappingLoader(spec.loader)
                return spec
        return None


class _WrappingLoader(importlib.abc.Loader):
    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        _apply_wraps(module.__name__, module)


def _wrap_build(cpp_extension: Any) -> None:
    """Wrap ``cpp_extension``'s ninja step so a failed build is replayed, not repeated
    (nothing to wrap where this torch has no such function, or it is wrapped already)."""
    build = getattr(cpp_extension, "_run_ninja_build", None)
    if build is None or getattr(build, "_kernelgate_remembers", False):
        return

    def run_ninja_build(build_directory: str, *args: Any, **kwargs: Any) -> None:
        key = build_key(build_directory)
        record = Path(build_directory) / f"{RECORD_PREFIX}{key}.txt" if key else None
        if record is not None and record.is_file():
            raise RuntimeError(record.read_text(errors="replace"))
        try:
            build(build_directory, *args, **kwargs)
        except RuntimeError as exc:
            message = str(exc)
            if record is not None and not any(m in message for m in TRANSIENT_MARKERS):
                with contextlib.suppress(OSError):  # not remembered: the next one builds again
                    record.write_text(message)
            raise

    run_ninja_build._kernelgate_remembers = True  # type: ignore[attr-defined]
    cpp_extension._run_ninja_build = run_ninja_build


# What is wrapped in each module when it is imported (``_wrap_when_imported``).
_WRAPS: dict[str, tuple[Callable[[Any], None], ...]] = {
    EXTENSION_MODULE: (_wrap_build, _wrap_jit_compile),
    TRITON_JIT_MODULE: (_wrap_triton_compile,),
}
