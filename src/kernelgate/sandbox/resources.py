"""Resource usage of the kernels a candidate launches: registers, spills, shared memory.

Three sources, one record shape (see ``docs/evidence.md``, RES-02):

* Device mode, Triton: the worker wraps ``JITFunction.run`` before the candidate is
  imported; every kernel a call launches is recorded with the compiled kernel's own
  figures: ``n_regs`` and ``metadata.shared``, spills from ``ptxas -v`` run on the kernel's
  own PTX with the flags Triton's backend uses (``ptxas_usage``, the CPU path's judgment),
  and the driver's local memory size beside them. Triton's ``n_spills`` is *not* a spill
  count: it is ``CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES / 4``, i.e. the stack frame (call ABI,
  local arrays) as well as spills, so it is only the fallback when ptxas cannot be asked.
* CPU mode, Triton under the interpreter: nothing is compiled, so the worker records each
  launch's specialization (argument types, divisibility, constexprs, launch options) and
  the judge asks the worker to compile those kernels offline for the target GPU
  (``triton.compile`` with a ``GPUTarget``; Triton ships ``ptxas`` and ``cuobjdump``, no
  driver is needed) in a helper forked before Triton was imported (``CompileServer``),
  which imports Triton and the candidate without the interpreter,
  then reads the cubin's resource usage with ``cuobjdump --dump-resource-usage``.
* CUDA C++ extensions (``load_inline``): the worker reports the extension's shared
  objects; the judge runs ``cuobjdump --dump-resource-usage`` on them (every kernel in the
  candidate's extension, launched or not).

Everything here that runs in the worker or the offline compiler sees candidate code; the
judge only parses JSON numbers and ``cuobjdump`` text.
"""

from __future__ import annotations

import contextlib
import importlib.util
import inspect
import io
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_ARCH = 90  # the offline compile target: sm_90 (H100/H200), the budget's device
LAUNCH_OPTIONS = ("num_warps", "num_stages", "num_ctas", "maxnreg", "enable_fp_fusion")
MAX_RECORDS = 256  # a candidate launching more distinct kernels than this is cut off here


# -- worker side --------------------------------------------------------------------------
class LaunchRecorder:
    """Records the kernels launched in this process (installed by the worker before import).

    ``drain()`` returns the records first seen since the last drain, as JSON-ready dicts.
    """

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.pending: list[dict[str, Any]] = []
        self.modules_before: set[str] = set(sys.modules)
        self.notes: list[str] = []
        self.ptxas_cache: dict[str, tuple[dict[str, Any] | None, str]] = {}
        self.realpaths: dict[str, str] = {}  # see ``extensions``
        # the worker's folder when it installs the recorder (its scratch, where it builds)
        self.scratch = _scratch_folder()
        self.places: tuple[list[str], list[str]] | None = None  # see ``_extension_places``

    def _add(self, record: dict[str, Any]) -> None:
        key = json.dumps(record, sort_keys=True, default=str)
        if key not in self.seen and len(self.seen) < MAX_RECORDS:
            self.seen.add(key)
            self.pending.append(record)

    def install(self, interpreter: bool) -> None:
        """Wrap Triton's launch entry point (compiled or interpreted); a no-op without Triton."""
        try:
            if interpreter:
                from triton.runtime.interpreter import InterpretedFunction

                self._wrap(InterpretedFunction, self._record_interpreted)
            else:
                from triton.runtime.jit import JITFunction

                self._wrap(JITFunction, self._record_compiled)
        except Exception as exc:  # no Triton, or an API this code does not know
            self.notes.append(f"Triton launch hook not installed: {type(exc).__name__}: {exc}")

    def _wrap(self, cls: type, record: Any) -> None:
        original = cls.run
        recorder = self

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            kernel = original(self, *args, **kwargs)  # grid=, warmup= travel in kwargs
            if not kwargs.get("warmup", False):
                try:
                    record(self, kernel, args, kwargs)
                except Exception as exc:  # never let bookkeeping break a launch
                    recorder.notes.append(f"launch not recorded: {type(exc).__name__}: {exc}")
            return kernel

        cls.run = run

    def _record_compiled(self, fn: Any, kernel: Any, args: Any, kwargs: Any) -> None:
        if kernel is None:
            return
        metadata = kernel.metadata
        n_regs = getattr(kernel, "n_regs", None)
        if n_regs is None and hasattr(kernel, "_init_handles"):
            kernel._init_handles()
            n_regs = getattr(kernel, "n_regs", None)
        n_spills = getattr(kernel, "n_spills", None)
        target = getattr(metadata, "target", None)
        kernel_hash = str(getattr(metadata, "hash", ""))
        if kernel_hash not in self.ptxas_cache:  # one ptxas run per compiled kernel
            self.ptxas_cache[kernel_hash] = ptxas_usage(
                _asm_text(kernel, "ptx"), metadata, int(getattr(target, "arch", TARGET_ARCH))
            )
        usage, why = self.ptxas_cache[kernel_hash]
        # Triton's n_spills is the driver's local size in 32-bit words (LOCAL bytes / 4):
        # stack frame and spills together, not a spill count.
        local_bytes = None if n_spills is None else 4 * int(n_spills)
        self._add(
            {
                "backend": "triton",
                "source": "compiled kernel launched on the device",
                "name": str(getattr(metadata, "name", getattr(fn, "__name__", "?"))),
                "hash": kernel_hash,
                "registers": None if n_regs is None else int(n_regs),
                **spill_figures(usage, why, local_bytes, "the driver's local memory size"),
                "shared_bytes": int(metadata.shared),
                "num_warps": int(getattr(metadata, "num_warps", 0)),
                "arch": str(getattr(target, "arch", "")),
            }
        )

    def _record_interpreted(self, fn: Any, kernel: Any, args: Any, kwargs: Any) -> None:
        options = {k: v for k, v in kwargs.items() if k not in ("grid", "warmup")}
        jit_kwargs = getattr(fn, "kwargs", {}) or {}  # what @triton.jit(...) was given
        self._add(
            launch_specialization(
                fn.fn,
                args,
                options,
                do_not_specialize=jit_kwargs.get("do_not_specialize") or (),
                do_not_specialize_on_alignment=jit_kwargs.get("do_not_specialize_on_alignment")
                or (),
            )
        )

    def extensions(self) -> list[dict[str, Any]]:
        """Shared objects of CUDA C++ extensions the candidate built and loaded.

        Where the candidate builds: the torch extensions root (``load_inline``'s default),
        or anywhere else in the worker's scratch folder (``build_directory="ext"``, relative
        to the worker's folder, as some CUDA-L1 candidates do), whichever module of the
        candidate's built it. Not the caches there (Triton's launcher modules, inductor's,
        the CUDA JIT cache): those are no candidate's kernels, nor is any library outside.
        """
        roots, caches = self._extension_places()
        if not roots:
            return []
        files: set[str] = set()
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None) or ""
            if name not in self.modules_before and file.endswith(".so"):
                files.add(file)
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/maps").read_text().splitlines():
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].endswith(".so"):
                    files.add(fields[5])
        # Resolved once per distinct file: every call asks, and a CUDA process maps a few
        # hundred library segments (resolving each on every call cost ~45 ms a call).
        paths = {self._resolved(file) for file in files}
        return [
            {"backend": "cuda-extension", "path": p}
            for p in sorted(paths)
            if any(_inside(p, r) for r in roots) and not any(_inside(p, c) for c in caches)
        ]

    def _extension_places(self) -> tuple[list[str], list[str]]:
        """(where the candidate's extensions are built, the caches inside those places),
        fixed at the first call: the worker's folder is its scratch until the candidate
        moves it, which must not move where the judge looks."""
        if self.places is None:
            roots = [r for r in (_torch_extensions_root(), self.scratch) if r]
            caches = [
                os.path.realpath(os.environ[k])
                for k in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "CUDA_CACHE_PATH")
                if os.environ.get(k)
            ]
            home = os.environ.get("TRITON_HOME")
            caches += [os.path.join(os.path.realpath(home), ".triton")] if home else []
            self.places = (roots, caches)
        return self.places

    def _resolved(self, file: str) -> str:
        if file not in self.realpaths:
            self.realpaths[file] = os.path.realpath(file)
        return self.realpaths[file]

    def drain(self) -> list[dict[str, Any]]:
        out = self.pending
        self.pending = []
        for record in self.extensions():
            self._add(record)
        out += self.pending
        self.pending = []
        for note in self.notes:
            out.append({"backend": "note", "detail": note[:500]})
        self.notes = []
        return out


def _asm_text(kernel: Any, key: str) -> str:
    """One of a compiled kernel's assembly texts (``ptx``), or "" when it has none."""
    try:
        value = kernel.asm[key]
    except Exception:
        return ""
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    return value if isinstance(value, str) else ""


def _scratch_folder() -> str:
    """The worker's scratch folder (its working directory; ``confine.scratch_env`` points
    ``TMPDIR`` at it), or "" in a process that has none of its own."""
    tmpdir = os.environ.get("TMPDIR")
    with contextlib.suppress(OSError):
        here = os.path.realpath(os.getcwd())
        if tmpdir and os.path.realpath(tmpdir) == here:
            return here
    return ""


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _torch_extensions_root() -> str:
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root:
        return os.path.realpath(root)
    with contextlib.suppress(Exception):
        from torch.utils.cpp_extension import get_default_build_root

        return os.path.realpath(get_default_build_root())
    return ""


def _jsonable(value: Any) -> Any:
    value = getattr(value, "value", value)  # tl.constexpr wraps its value
    if value is None or isinstance(value, bool | int | float | str):
        return value
    raise TypeError(f"constexpr value {value!r} cannot be recorded")


def launch_specialization(
    fn: Any,
    args: Any,
    kwargs: dict[str, Any],
    do_not_specialize: Any = (),
    do_not_specialize_on_alignment: Any = (),
) -> dict[str, Any]:
    """How Triton would specialize this launch: argument types, 16-divisibility, constexprs.

    Uses Triton's own specializer where it is available, so the offline compile sees the
    kernel the device would compile for the same arguments. ``do_not_specialize`` and
    ``do_not_specialize_on_alignment`` are the ``@triton.jit`` arguments of that name
    (parameter names or indices), honoured as ``JITFunction`` does: no value specialization
    (an integer equal to 1 stays an argument, no 16-divisibility), no alignment attribute.
    """
    from triton.backends.compiler import BaseBackend
    from triton.runtime.jit import native_specialize_impl

    params = inspect.signature(fn).parameters

    def listed(names: Any, index: int, name: str) -> bool:
        return index in names or name in names

    bound = inspect.signature(fn).bind_partial(
        *args, **{k: v for k, v in kwargs.items() if k in params}
    )
    bound.apply_defaults()
    signature: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    attrs: dict[str, str] = {}
    for index, (name, param) in enumerate(params.items()):
        value = bound.arguments.get(name)
        if "constexpr" in str(param.annotation):
            signature[name] = "constexpr"
            constexprs[name] = _jsonable(value)
            continue
        specialize = not listed(do_not_specialize, index, name)
        align = not listed(do_not_specialize_on_alignment, index, name)
        kind, attr = native_specialize_impl(BaseBackend, value, False, specialize, align)
        signature[name] = kind
        if kind == "constexpr":
            constexprs[name] = _jsonable(attr)
        elif isinstance(attr, str) and attr:
            attrs[name] = attr
    return {
        "backend": "triton-interpreter",
        "name": fn.__name__,
        "file": inspect.getsourcefile(fn) or "",
        "signature": signature,
        "constexprs": constexprs,
        "attrs": attrs,
        "options": {k: _jsonable(kwargs[k]) for k in LAUNCH_OPTIONS if k in kwargs},
    }


# -- judge side ---------------------------------------------------------------------------
_FUNCTION = re.compile(r"^\s*Function ([^:]+):\s*$")
_FIGURE = re.compile(r"([A-Z]+(?:\[\d+\])?):(\d+)")
_ARCH = re.compile(r"arch = (sm_\d+\w*)")


def find_cuobjdump() -> str | None:
    """``cuobjdump`` from the CUDA toolkit, or the copy Triton ships."""
    found = shutil.which("cuobjdump")
    if found:
        return found
    candidates = [Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "cuobjdump"]
    with contextlib.suppress(ImportError):
        import triton

        candidates.append(
            Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        )
    return next((str(c) for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


def parse_resource_usage(text: str) -> list[dict[str, Any]]:
    """Kernels and their figures from ``cuobjdump --dump-resource-usage`` output."""
    kernels: list[dict[str, Any]] = []
    arch = ""
    current: str | None = None
    for line in text.splitlines():
        if match := _ARCH.search(line):
            arch = match.group(1)
        if match := _FUNCTION.match(line):
            current = match.group(1).strip()
            continue
        if current is not None and "REG:" in line:
            figures = {k: int(v) for k, v in _FIGURE.findall(line)}
            kernels.append(
                {
                    "name": current,
                    "arch": arch,
                    "registers": figures.get("REG", 0),
                    "stack_bytes": figures.get("STACK", 0),
                    "static_shared_bytes": figures.get("SHARED", 0),
                    "local_bytes": figures.get("LOCAL", 0),
                }
            )
            current = None
    return kernels


_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CLOSING = "INXFL"  # in template arguments, what a matching "E" closes
_STANDARD_SUBSTITUTIONS = "tabsiod"  # St, Sa, Sb, Ss, Si, So, Sd


class _Unreadable(ValueError):
    """A mangled name this reader does not handle."""


def mangled_base_name(symbol: str) -> str | None:
    """The unqualified name of a kernel's symbol as ``cuobjdump`` prints it, or None.

    ``cuobjdump --dump-resource-usage`` names a CUDA C++ kernel by its Itanium-mangled
    symbol (``_Z10add_kernelPKfPfi``, ``_ZN2ns10add_kernelIfEEvPT_``); the profiler names the
    same launch demangled (``void ns::add_kernel<float>(float*)``). Both are reduced to the
    base name (``add_kernel``) to be matched. An ``extern "C"`` kernel's symbol is its name.
    Reads only the name part of the encoding: free functions, namespaces (anonymous ones
    included), internal linkage, template arguments (skipped); None for anything else
    (the caller then keeps the symbol and judges the kernel whether it launched or not).
    """
    if not symbol.startswith("_Z"):
        return symbol if _IDENTIFIER.fullmatch(symbol) else None
    try:
        return _base_name(symbol, 2)
    except (_Unreadable, IndexError, ValueError):
        return None


def _source_name(symbol: str, at: int) -> tuple[str, int]:
    digits = re.match(r"\d+", symbol[at:])
    if digits is None:
        raise _Unreadable(symbol)
    start = at + len(digits.group())
    end = start + int(digits.group())
    if end > len(symbol):
        raise _Unreadable(symbol)
    return symbol[start:end], end


def _base_name(symbol: str, at: int) -> str | None:
    if symbol[at] == "L":  # internal linkage (a static kernel)
        at += 1
    if symbol[at].isdigit():
        return _source_name(symbol, at)[0]
    if symbol[at] != "N":
        return None
    at += 1
    while symbol[at] in "rVKRO":  # qualifiers of a member function
        at += 1
    last = None
    while symbol[at] != "E":
        char = symbol[at]
        if char.isdigit():
            last, at = _source_name(symbol, at)
        elif char == "I":
            at = _skip_template_arguments(symbol, at)
        elif char == "S":
            at = _skip_substitution(symbol, at)
        else:
            raise _Unreadable(symbol)
    return last


def _skip_substitution(symbol: str, at: int) -> int:
    if symbol[at + 1] in _STANDARD_SUBSTITUTIONS:
        return at + 2
    end = symbol.index("_", at)  # S_, S0_, SA_
    return end + 1


def _skip_template_arguments(symbol: str, at: int) -> int:
    """The index after the ``I ... E`` that starts at ``at``: source names skipped by their
    length, literals (``Li256E``) and parameters (``T_``) by their own grammar."""
    depth = 0
    while True:
        char = symbol[at]
        if char.isdigit():
            at = _source_name(symbol, at)[1]
        elif char == "L" and symbol[at + 1] != "_":  # a literal: L <type> [n] <digits> E
            literal = re.match(r"L(?:D.|[a-z])n?[0-9a-f]*E", symbol[at:])
            if literal is None:
                raise _Unreadable(symbol)
            at += len(literal.group())
        elif char in "ST":
            at = _skip_substitution(symbol, at) if char == "S" else symbol.index("_", at) + 1
        elif char == "D":  # Dh, Dn, ...; Dv <n> _ <type>
            at = symbol.index("_", at) + 1 if symbol[at + 1] == "v" else at + 2
        elif char in _CLOSING:
            depth += 1
            at += 1
        elif char == "E":
            depth -= 1
            at += 1
            if depth == 0:
                return at
        else:  # a builtin type or a type modifier: one letter
            at += 1


def dump_resource_usage(path: str, timeout: float = 120.0) -> tuple[list[dict[str, Any]], str]:
    """Run ``cuobjdump --dump-resource-usage`` on a cubin or shared object.

    Returns the kernels found and, when none could be read, why; ``([], "")`` for a library
    with no device code at all.
    """
    tool = find_cuobjdump()
    if tool is None:
        return [], "cuobjdump not found (CUDA toolkit or Triton's bundled copy)"
    try:
        done = subprocess.run(
            [tool, "--dump-resource-usage", path],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return [], f"cuobjdump failed: {exc}"
    kernels = parse_resource_usage(done.stdout)
    if not kernels and "does not contain device code" in done.stdout + done.stderr:
        return [], ""  # a host-only library (a C++ helper beside the kernels): nothing to judge
    if not kernels:
        return [], f"cuobjdump found no SASS in {path} ({done.stderr.strip()[:300] or 'PTX only?'})"
    return kernels, ""


class CompileServer:
    """A forked helper of the worker that compiles interpreted launches offline (CPU mode).

    It must be forked before the worker imports Triton: under ``TRITON_INTERPRET=1``
    Triton's own library functions (``tl.max``, ``tl.sum``, ...) become interpreted at
    import, and running interpreted kernels patches ``triton.language`` in place, so only a
    process that never imported Triton can compile for a GPU. The child has torch imported
    already (forking costs no imports), waits for one request at a time (length-prefixed
    JSON over a pipe), imports Triton and the candidate without the interpreter, compiles
    and answers. It exits when the worker closes the pipe.
    """

    def __init__(self, close_fds: tuple[int, ...] = ()) -> None:
        req_read, self._req_write = os.pipe()
        self._resp_read, resp_write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # child: never returns
            code = 0
            try:
                for fd in (*close_fds, self._req_write, self._resp_read):
                    with contextlib.suppress(OSError):
                        os.close(fd)
                _serve_compiles(req_read, resp_write)
            except BaseException:
                code = 1
            os._exit(code)
        os.close(req_read)
        os.close(resp_write)

    def compile(
        self, candidate: str, records: list[dict[str, Any]], timeout: float
    ) -> list[dict[str, Any]]:
        """Figures (or ``error``) for each record; errors for all when the helper fails."""

        def failed(why: str) -> list[dict[str, Any]]:
            return [{"name": r.get("name"), "error": why} for r in records]

        if self.pid <= 0:
            return failed("offline compiler not available (helper gone)")
        try:
            _write_message(self._req_write, {"candidate": candidate, "records": records})
            results = _read_message(self._resp_read, time.monotonic() + timeout)
        except TimeoutError:
            self.stop()
            return failed(f"offline compile timed out ({timeout:g} s)")
        except (OSError, ValueError, EOFError) as exc:
            self.stop()
            return failed(f"offline compiler died: {type(exc).__name__}: {exc}")
        if not isinstance(results, list):
            return failed("offline compiler sent no list")
        return [r for r in results if isinstance(r, dict)]

    def stop(self) -> None:
        if self.pid > 0:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(self.pid, 0)
            self.pid = -1


def _write_message(fd: int, value: Any) -> None:
    payload = json.dumps(value).encode()
    view = memoryview(len(payload).to_bytes(8, "little") + payload)
    while view:
        view = view[os.write(fd, view) :]


def _read_exact(fd: int, size: int, deadline: float | None) -> bytes:
    chunks: list[bytes] = []
    while size:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
        chunk = os.read(fd, min(size, 1 << 16))
        if not chunk:
            raise EOFError("pipe closed")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def _read_message(fd: int, deadline: float | None = None) -> Any:
    size = int.from_bytes(_read_exact(fd, 8, deadline), "little")
    return json.loads(_read_exact(fd, size, deadline))


def _serve_compiles(req_fd: int, resp_fd: int) -> None:
    while True:
        try:
            request = _read_message(req_fd)
        except EOFError:
            return
        records = list(request.get("records", []))
        try:
            results = compile_records(str(request["candidate"]), records)
        except BaseException as exc:
            results = [
                {"name": r.get("name"), "error": f"{type(exc).__name__}: {exc}"[:600]}
                for r in records
            ]
        _write_message(resp_fd, results)


def compile_records(candidate: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Compile interpreted launch records offline for sm_90 and read their resource usage.

    Imports ``candidate`` without the interpreter, so it must run in a process where Triton
    was never imported under ``TRITON_INTERPRET=1`` (``CompileServer``'s child, or a fresh
    interpreter). One result per record: the figures, or ``error``.
    """
    os.environ.pop("TRITON_INTERPRET", None)
    from triton import knobs

    with contextlib.suppress(Exception):
        knobs.runtime.interpret = False
    try:
        spec = importlib.util.spec_from_file_location("kernelgate_candidate_compiled", candidate)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["kernelgate_candidate_compiled"] = module
        spec.loader.exec_module(module)
    except BaseException as exc:
        return [
            {
                "name": r.get("name"),
                "error": "candidate import without the interpreter failed: "
                f"{type(exc).__name__}: {exc}"[:600],
            }
            for r in records
        ]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="kernelgate-cubin-") as tmp:
        for record in records:
            try:
                results.append(_compile_one(module, record, Path(tmp)))
            except BaseException as exc:
                results.append(
                    {"name": record.get("name"), "error": f"{type(exc).__name__}: {exc}"[:600]}
                )
    return results


def _find_jit(module: Any, name: str, file: str) -> Any:
    """The launched ``@triton.jit`` function: in the candidate, or in a module it imported
    (kernels often live in a library the candidate calls, like ``kernelgate.kernels.gdn``)."""
    from triton.runtime.jit import JITFunction

    same_file = [
        m
        for m in list(sys.modules.values())
        if file
        and isinstance(getattr(m, "__file__", None), str)
        and os.path.realpath(m.__file__) == os.path.realpath(file)
    ]
    for owner in [module, *same_file]:
        for value in vars(owner).values():
            seen = 0
            while value is not None and not isinstance(value, JITFunction) and seen < 8:
                value, seen = getattr(value, "fn", None), seen + 1
            if isinstance(value, JITFunction) and value.fn.__name__ == name:
                source = inspect.getsourcefile(value.fn) or ""
                if not file or os.path.realpath(source) == os.path.realpath(file):
                    return value
    raise LookupError(
        f"kernel {name} is not a module-level @triton.jit of the candidate or of a module "
        "it imports"
    )


_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)'")
_PTXAS_PROPERTIES = re.compile(
    r"Function properties for (\S+)\s*\n\s*(\d+) bytes stack frame, (\d+) bytes spill stores, "
    r"(\d+) bytes spill loads"
)
_PTXAS_REGISTERS = re.compile(r"Used (\d+) registers")


def parse_ptxas_log(text: str) -> dict[str, Any] | None:
    """Figures from ``ptxas -v`` output (None when it has none).

    Spill stores and loads are summed over every function ptxas lists (a kernel's callees
    spill into the same local memory); the stack frame is the entry functions' own (it
    includes the spill slots, and also call-ABI saves and local arrays, which are not spills).
    """
    functions = [
        {
            "name": m[0],
            "stack_frame": int(m[1]),
            "spill_stores": int(m[2]),
            "spill_loads": int(m[3]),
        }
        for m in _PTXAS_PROPERTIES.findall(text)
    ]
    if not functions:
        return None
    entries = set(_PTXAS_ENTRY.findall(text))
    frames = [f["stack_frame"] for f in functions if f["name"] in entries] or [
        f["stack_frame"] for f in functions
    ]
    registers = [int(n) for n in _PTXAS_REGISTERS.findall(text)]
    return {
        "spill_store_bytes": sum(f["spill_stores"] for f in functions),
        "spill_load_bytes": sum(f["spill_loads"] for f in functions),
        "stack_frame_bytes": max(frames),
        "registers": max(registers) if registers else None,
        "functions": functions,
    }


@contextlib.contextmanager
def _ptxas_log_printed() -> Any:
    """Triton's ``dump_ptxas_log`` knob switched on, restored afterwards."""
    from triton import knobs

    scope = getattr(knobs.nvidia, "scope", None)
    if scope is not None:
        with scope():
            knobs.nvidia.dump_ptxas_log = True
            yield
        return
    saved = os.environ.get("TRITON_DUMP_PTXAS_LOG")
    os.environ["TRITON_DUMP_PTXAS_LOG"] = "1"
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TRITON_DUMP_PTXAS_LOG", None)
        else:
            os.environ["TRITON_DUMP_PTXAS_LOG"] = saved


def _ptxas_log_from_triton(ptx: str, options: Any, arch: int) -> str:
    """``ptxas -v`` on ``ptx`` through Triton's own backend (``make_cubin``): the same ptxas
    binary and flags (``--fmad``, ``ptx_options``, version-specific ones such as
    ``--regAllocOptLevel``) as the compile that produced the kernel."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend

    backend = make_backend(GPUTarget("cuda", arch, 32))
    printed = io.StringIO()
    with _ptxas_log_printed(), contextlib.redirect_stdout(printed):
        backend.make_cubin(ptx, {}, options, arch)
    return printed.getvalue()


def _ptxas_log_direct(ptx: str, options: Any, arch: int) -> str:
    """``ptxas -v`` on ``ptx`` called directly (Triton's ptxas, its basic flags)."""
    from triton.backends.nvidia.compiler import get_ptxas

    try:
        ptxas = get_ptxas(arch).path
    except TypeError:  # older Triton: no arch argument
        ptxas = get_ptxas().path
    target = re.search(r"^\.target\s+(sm_\w+)", ptx, re.MULTILINE)  # sm_90a for wgmma
    gpu = target.group(1) if target else f"sm_{arch}"
    fmad = [] if getattr(options, "enable_fp_fusion", True) else ["--fmad=false"]
    with tempfile.TemporaryDirectory(prefix="kernelgate-ptxas-") as tmp:
        path = Path(tmp) / "kernel.ptx"
        path.write_text(ptx)
        done = subprocess.run(
            [ptxas, "-v", *fmad, f"--gpu-name={gpu}", str(path), "-o", str(path) + ".o"],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    if done.returncode != 0:
        raise RuntimeError(f"ptxas exit {done.returncode}: {done.stderr.strip()[:300]}")
    return done.stdout + done.stderr


def ptxas_usage(
    ptx: str, options: Any, arch: int, *, triton_flags: bool = True
) -> tuple[dict[str, Any] | None, str]:
    """What ``ptxas -v`` reports for a Triton kernel's PTX (``parse_ptxas_log``), and, when it
    could not be obtained, why. ``options`` are the kernel's compile options (a compiled
    kernel's ``metadata`` will do).

    ``triton_flags``: ask through Triton's backend, with every flag it passes. Right on the
    device, where that Triton built the kernel that ran. Offline the local Triton is not the
    device's, and its version-specific flags (Triton >= 3.7 adds ``--regAllocOptLevel=2``,
    under which kernels that do not spill with the H200's Triton 3.6 show a few bytes) would
    judge another toolchain, so the offline path asks ptxas directly with the flags every
    Triton passes.
    """
    if not ptx:
        return None, "the kernel's PTX is not available"
    why, usage = "", None
    if triton_flags:
        try:
            usage = parse_ptxas_log(_ptxas_log_from_triton(ptx, options, arch))
        except Exception as exc:  # a Triton without these internals: call ptxas ourselves
            why = f"{type(exc).__name__}: {exc}"[:300]
    if usage is None:
        try:
            usage = parse_ptxas_log(_ptxas_log_direct(ptx, options, arch))
        except Exception as exc:
            return None, f"{why + '; ' if why else ''}{type(exc).__name__}: {exc}"[:600]
    if usage is None:
        return None, "ptxas -v printed no function properties"
    return usage, ""


def spill_figures(
    usage: dict[str, Any] | None, why: str, local_bytes: int | None, local_what: str
) -> dict[str, Any]:
    """The spill part of a Triton kernel's record, the same judgment on the device and offline.

    Spills are what ptxas reports as spill stores. The stack frame (and the local memory the
    driver or cuobjdump reports, which is that frame plus local arrays) also holds non-spill
    locals such as call-ABI saves, so it is recorded beside, not counted as spills. Only when
    ptxas cannot be asked is the whole local memory taken as spills, erring towards failure.
    """
    if usage is not None:
        return {
            "spill_bytes": usage["spill_store_bytes"],
            "spill_load_bytes": usage["spill_load_bytes"],
            "stack_frame_bytes": usage["stack_frame_bytes"],
            "local_memory_bytes": local_bytes,
            "spill_source": "ptxas -v spill stores (Triton's ptxas, on the kernel's PTX); "
            f"stack frame and {local_what} recorded beside, not counted as spills",
        }
    return {
        "spill_bytes": local_bytes,
        "spill_load_bytes": None,
        "stack_frame_bytes": None,
        "local_memory_bytes": local_bytes,
        "spill_source": f"ptxas could not be asked ({why}): all of {local_what} counted as "
        "spills (it includes any stack frame), erring towards failure",
    }


def _compile_one(module: Any, record: dict[str, Any], tmp: Path) -> dict[str, Any]:
    import triton
    from triton.backends.compiler import BaseBackend, GPUTarget
    from triton.compiler import ASTSource

    jit = _find_jit(module, record["name"], record.get("file", ""))
    names = list(record["signature"])
    attrs = {
        (names.index(k),): BaseBackend.parse_attr(v) for k, v in record.get("attrs", {}).items()
    }
    source = ASTSource(jit, dict(record["signature"]), dict(record["constexprs"]), attrs)
    compiled = triton.compile(
        source, target=GPUTarget("cuda", TARGET_ARCH, 32), options=dict(record.get("options", {}))
    )
    cubin = tmp / f"{record['name']}.cubin"
    cubin.write_bytes(compiled.asm["cubin"])
    kernels, why = dump_resource_usage(str(cubin))
    if not kernels:
        return {"name": record["name"], "error": why or "cuobjdump: no device code in the cubin"}
    usage = kernels[0]
    ptxas, why = ptxas_usage(
        compiled.asm.get("ptx", ""), compiled.metadata, TARGET_ARCH, triton_flags=False
    )
    local_bytes = usage["stack_bytes"] + usage["local_bytes"]
    return {
        "backend": "triton",
        "source": f"offline compile for sm_{TARGET_ARCH} (triton {triton.__version__}, "
        "ptxas + cuobjdump, no device)",
        "name": record["name"],
        "registers": usage["registers"],
        **spill_figures(ptxas, why, local_bytes, "cuobjdump's STACK + LOCAL"),
        "shared_bytes": int(compiled.metadata.shared),
        "static_shared_bytes": usage["static_shared_bytes"],
        "num_warps": int(compiled.metadata.num_warps),
        "arch": f"sm_{TARGET_ARCH}",
        "specialization": {k: record[k] for k in ("signature", "constexprs", "attrs", "options")},
    }
