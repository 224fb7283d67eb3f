"""Authorship: how much of a candidate call's device time runs in kernels it wrote (AUTH-01).

A "kernel" that is an eager PyTorch port with a fig-leaf kernel beside it is numerically
right and passes every gate; what it is not is a kernel. This module measures, for one
representative call, the kernels the call launched and their device time, and attributes
each one:

* **authored**: a ``@triton.jit`` function defined in a file of the candidate's own folder
  (the candidate file, or a module beside it that it imports; never site-packages, never the
  worker's scratch, where caches and generated code live), or a ``__global__`` kernel of a
  CUDA extension the candidate built (a torch extension under ``TORCH_EXTENSIONS_DIR``: its
  kernel names are read from the sources in its build folder and those ``build.ninja``
  names);
* **library**: everything else (aten, cuBLAS, cuDNN, Triton kernels of installed packages or
  of torch.compile, memory copies).

How it is measured depends on the mode:

* device (``cuda-kineto``): ``torch.profiler`` with the CUDA activity (Kineto / CUPTI); every
  kernel, memcpy and memset the call ran on the device, with its device time, matched by
  name: a Triton kernel by its compiled name (recorded at launch, for candidate files only),
  an extension kernel by its unqualified name among the ``__global__`` names of the
  candidate's sources (never a kernel in ``at::``, ``c10::``, ``torch::`` and the like). A
  library kernel that happens to share a Triton kernel's name is not claimed beyond the
  number of launches the candidate's kernel made in the call.
* CPU (``cpu-interpreter``): Triton launches under ``TRITON_INTERPRET=1`` are timed as a
  whole (each wrapped in a profiler range whose label carries a nonce), and every top-level
  aten op outside those launches is library time. Wall time, not device time: the
  interpreter is far slower than a device, so the CPU share overstates authored work (an
  honest Triton kernel reads ~100% either way; a torch matmul beside it reads smaller than
  on a device).

Worker side (``AuthorshipProbe``) runs in the worker, installed before the candidate is
imported; it sends back plain names and numbers only. Judge side (``authorship_evidence``,
``authorship_rule``) treats the record as untrusted bytes: every field is type-checked and
bounded, and the share is computed here, not taken from the worker. In-process measurement
can be fooled by code that runs in the same process (a candidate can patch anything there);
AUTH-01 is a rule against honest-looking ports, not a sandbox. docs/rules.md says more.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import secrets
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernelgate.static.outcome import RuleResult

AUTH_RULE = "AUTH-01"
# The default minimum share for kernel-writing formats (KernelBench runs, CUDA-L1, problem
# folders): at least half the device time must run in the candidate's own kernels.
DEFAULT_MIN_AUTHORED_SHARE = 0.5
KERNEL_WRITING_FORMATS = ("kernelbench-run", "cuda-l1", "problem")
HOW = ("cuda-kineto", "cpu-interpreter")
MAX_KERNELS = 48  # distinct kernel names sent back; the rest are summed into two entries
MAX_NAME = 240  # characters of a kernel name kept
MAX_NOTES = 8
# Kernels in these namespaces are PyTorch's or a library's, whoever launched them.
LIBRARY_NAMESPACES = ("at", "c10", "torch", "cub", "thrust", "cutlass", "cute", "flash")
SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".h", ".hpp")
MAX_SOURCE_BYTES = 4 * 1024 * 1024  # per extension source file read for kernel names
_GLOBAL = re.compile(
    r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:(?:static|inline|__forceinline__)\s+)*"
    r"void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?([A-Za-z_]\w*)"
)


# -- worker side --------------------------------------------------------------------------
class AuthorshipProbe:
    """Tells authored Triton launches from library ones, and profiles one call on request.

    ``install`` wraps Triton's launch entry point (``JITFunction.run`` on a device,
    ``InterpretedFunction.run`` under the interpreter) on top of whatever already wraps it;
    ``measure`` runs one call under ``torch.profiler`` and returns the plain record.
    """

    def __init__(self) -> None:
        self.candidate_dir = ""
        self.excluded: tuple[str, ...] = ()
        self.interpreter = False
        self.profiling = False
        # a label a candidate cannot guess by reading the source: it marks our own ranges
        self.label = f"kernelgate.{secrets.token_hex(6)}"
        self.launches: Counter[str] = Counter()  # authored launches in the profiled call
        self.authored_names: set[str] = set()  # compiled names of authored Triton kernels
        self.notes: list[str] = []
        self._device_tracing: bool | None = None  # _traces_device_work's answer, once known
        self._authored_files: dict[str, bool] = {}

    def install(self, candidate_path: str, interpreter: bool) -> None:
        self.candidate_dir = os.path.realpath(os.path.dirname(os.path.abspath(candidate_path)))
        self.interpreter = interpreter
        scratch = [os.getcwd()]  # the worker's scratch: caches, generated code
        scratch += [
            os.environ[k]
            for k in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TORCH_EXTENSIONS_DIR")
            if os.environ.get(k)
        ]
        self.excluded = tuple(os.path.realpath(p) for p in scratch)
        try:
            if interpreter:
                from triton.runtime.interpreter import InterpretedFunction as launcher
            else:
                from triton.runtime.jit import JITFunction as launcher
        except Exception as exc:  # no Triton: nothing of it can be authored
            self.notes.append(f"Triton launch hook not installed: {type(exc).__name__}: {exc}")
            return
        self._wrap(launcher)

    def is_authored_file(self, filename: str) -> bool:
        """Whether ``filename`` is one of the candidate's own files (see the module doc)."""
        if filename not in self._authored_files:
            path = os.path.realpath(filename) if filename and filename[0] != "<" else ""
            self._authored_files[filename] = bool(path) and authored_path(
                path, self.candidate_dir, self.excluded
            )
        return self._authored_files[filename]

    def _wrap(self, launcher: type) -> None:
        original = launcher.run
        probe = self

        def run(self: Any, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("warmup", False):
                return original(self, *args, **kwargs)
            fn = getattr(self, "fn", None)
            name = str(getattr(fn, "__name__", "?"))
            try:
                authored = probe.is_authored_file(fn.__code__.co_filename)  # type: ignore[union-attr]
            except Exception:
                authored = False
            if probe.profiling and authored:
                probe.launches[name] += 1
            if probe.profiling and probe.interpreter:
                kind = "authored" if authored else "library"
                with _record_function(f"{probe.label}.{kind}:{name}"):
                    return original(self, *args, **kwargs)
            kernel = original(self, *args, **kwargs)
            if authored:
                compiled = getattr(getattr(kernel, "metadata", None), "name", None)
                probe.authored_names.add(name)
                if isinstance(compiled, str) and compiled != name:
                    probe.authored_names.add(compiled)
                    if probe.profiling:
                        probe.launches[compiled] += 1
            return kernel

        launcher.run = run  # type: ignore[method-assign]

    def measure(
        self, call: Callable[[], Any], device_type: str, extensions: Iterable[str] = ()
    ) -> dict[str, Any]:
        """Run ``call`` once under the profiler; the record of its kernels (plain data).

        ``call`` must end with the device synchronised, so every kernel it queued is in the
        trace. ``extensions``: shared objects of the candidate's torch extensions.
        """
        # autograd's profiler, not torch.profiler.profile: the latter imports torch._inductor
        # on start (``hasattr(torch, "_inductor")``), 2 to 10 s of every worker it profiles in
        from torch.autograd.profiler import profile

        cuda = device_type == "cuda" and not self.interpreter
        if cuda:
            from torch.autograd.profiler import _supported_activities
            from torch.profiler import ProfilerActivity

            if ProfilerActivity.CUDA not in _supported_activities():
                # autograd's profiler would fall back to CPU-side timing: no device events,
                # which would read as "no kernel of its own"
                raise RuntimeError("this torch's Kineto has no CUDA activity (no CUPTI)")
            if not self._traces_device_work(profile):
                raise RuntimeError(
                    "the profiler recorded no device event for a kernel of its own launched "
                    "under it: CUDA activity tracing (CUPTI) does not work in this worker"
                )
        self.launches = Counter()
        with profile(use_kineto=True, use_device="cuda" if cuda else None) as prof:
            self.profiling = True
            try:
                call()
            finally:
                self.profiling = False
        events = list(prof.function_events)
        if cuda:
            declared = extension_kernel_names(extensions)
            kernels = self._device_kernels(events, declared)
            how = "cuda-kineto"
        else:
            kernels = self._interpreted_kernels(events)
            how = "cpu-interpreter"
        notes, self.notes = self.notes[:MAX_NOTES], []
        return {"how": how, "kernels": bounded_kernels(kernels), "notes": notes}

    def _traces_device_work(self, profile: Callable[..., Any]) -> bool:
        """Whether a profile of a known launch holds a device event, asked once per worker.

        A trace without device events reads as "no kernel ran", which AUTH-01 takes for a
        share of 0 and rejects. That is right for a candidate that launched nothing, and
        wrong where the profiler cannot see device work in this worker (CUPTI unavailable,
        taken by another tool): an empty trace of a known launch says the measurement
        itself does not work, so it does not happen, and AUTH-01 says skipped and why. It
        also starts CUPTI before the profiled call, outside its trace.
        """
        if self._device_tracing is None:
            from torch.autograd import DeviceType

            with profile(use_kineto=True, use_device="cuda") as prof:
                self._probe_launch()
            self._device_tracing = any(
                getattr(e, "device_type", None) == DeviceType.CUDA for e in prof.function_events
            )
        return self._device_tracing

    @staticmethod
    def _probe_launch() -> None:
        """One small kernel on the current device, waited for."""
        import torch

        torch.ones(1, device="cuda").add_(1)
        torch.cuda.synchronize()

    def _interpreted_kernels(self, events: list[Any]) -> list[dict[str, Any]]:
        """Our Triton launch ranges, and top-level aten ops outside them, with wall time."""
        ours = f"{self.label}."
        found: list[dict[str, Any]] = []
        for event in events:
            name = str(getattr(event, "name", ""))
            seconds = _elapsed_s(event)
            if name.startswith(ours):
                kind, _, kernel = name[len(ours) :].partition(":")
                if _inside(event, lambda n: n.startswith(ours)):
                    continue  # a launch inside a launch: its time is counted once
                found.append(_entry(kernel, kind == "authored", seconds))
            elif name.startswith("aten::") and not _inside(
                event, lambda n: n.startswith("aten::") or n.startswith(ours)
            ):
                found.append(_entry(name, False, seconds))
        return found

    def _device_kernels(self, events: list[Any], declared: set[str]) -> list[dict[str, Any]]:
        """Every device event (kernel, memcpy, memset) with its device time, attributed."""
        from torch.autograd import DeviceType

        device_events = [e for e in events if getattr(e, "device_type", None) == DeviceType.CUDA]
        if not device_events and sum(self.launches.values()):
            raise RuntimeError(
                f"the trace holds no device event, but the call launched "
                f"{sum(self.launches.values())} authored Triton kernel(s)"
            )
        seen: Counter[str] = Counter(str(e.name) for e in device_events)
        found: list[dict[str, Any]] = []
        for event in device_events:
            name = str(event.name)
            seconds = _elapsed_s(event)
            if name in self.authored_names:
                # a library kernel of the same name is not claimed beyond the launches the
                # candidate's own kernel made in this call (all of them where the hook saw
                # none: a CUDA graph replays launches made before)
                launched = self.launches.get(name, 0)
                share = 1.0 if launched == 0 else min(1.0, launched / seen[name])
                found.append(_entry(name, True, seconds * share, launches=share))
                if share < 1.0:
                    found.append(_entry(name, False, seconds * (1 - share), launches=1 - share))
            else:
                found.append(_entry(name, is_declared_kernel(name, declared), seconds))
        return found


@contextlib.contextmanager
def _record_function(label: str) -> Any:
    from torch.autograd.profiler import record_function

    with record_function(label):
        yield


def _elapsed_s(event: Any) -> float:
    try:
        seconds = float(event.time_range.elapsed_us()) / 1e6
    except Exception:
        return 0.0
    return seconds if math.isfinite(seconds) and seconds > 0 else 0.0


def _inside(event: Any, counts: Callable[[str], bool]) -> bool:
    parent = getattr(event, "cpu_parent", None)
    depth = 0
    while parent is not None and depth < 10_000:
        if counts(str(getattr(parent, "name", ""))):
            return True
        parent = getattr(parent, "cpu_parent", None)
        depth += 1
    return False


def _entry(name: str, authored: bool, seconds: float, launches: float = 1.0) -> dict[str, Any]:
    return {"name": name, "authored": authored, "device_time_s": seconds, "launches": launches}


def bounded_kernels(entries: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entries summed per (name, authored), largest first, at most ``MAX_KERNELS`` of them
    (the rest summed into one authored and one library entry)."""
    totals: dict[tuple[str, bool], list[float]] = {}
    for entry in entries:
        key = (str(entry["name"])[:MAX_NAME], bool(entry["authored"]))
        slot = totals.setdefault(key, [0.0, 0.0])
        slot[0] += float(entry["device_time_s"])
        slot[1] += float(entry.get("launches", 1.0))
    ordered = sorted(totals.items(), key=lambda item: -item[1][0])
    kept = [_summed(name, authored, figures) for (name, authored), figures in ordered]
    if len(kept) <= MAX_KERNELS:
        return kept
    rest = kept[MAX_KERNELS - 2 :]
    kept = kept[: MAX_KERNELS - 2]
    for authored in (True, False):
        mine = [k for k in rest if k["authored"] is authored]
        if mine:
            kept.append(
                {
                    "name": f"({len(mine)} other {'authored' if authored else 'library'} kernels)",
                    "authored": authored,
                    "device_time_s": sum(k["device_time_s"] for k in mine),
                    "launches": sum(k["launches"] for k in mine),
                }
            )
    return kept


def _summed(name: str, authored: bool, figures: list[float]) -> dict[str, Any]:
    return {
        "name": name,
        "authored": authored,
        "device_time_s": figures[0],
        "launches": round(figures[1]),
    }


def authored_path(path: str, candidate_dir: str, excluded: Iterable[str]) -> bool:
    """Whether a resolved ``path`` is in the candidate's folder and none of the places whose
    code is not the candidate's (installed packages, the worker's scratch and caches,
    kernelgate itself).

    A candidate whose own folder is inside kernelgate (the red team's, redteam/controls and
    redteam/defects) has kernelgate's kernels outside that folder excluded already; only
    for it is kernelgate's code not excluded as a whole, or no red-team kernel could ever be
    authored."""
    if not candidate_dir or not _under(path, candidate_dir):
        return False
    if any(_under(path, other) for other in excluded):
        return False
    # kernelgate is importable from the editable checkout, so it is no site-packages path
    kernelgate = os.path.realpath(str(Path(__file__).parents[1]))
    if _under(path, kernelgate) and not _under(candidate_dir, kernelgate):
        return False
    parts = Path(path).parts
    return "site-packages" not in parts and "dist-packages" not in parts


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def extension_kernel_names(shared_objects: Iterable[str]) -> set[str]:
    """``__global__`` kernel names declared in the sources of the candidate's extensions:
    the files in each shared object's build folder and those its ``build.ninja`` names."""
    from kernelgate.sandbox.builds import _named_inputs

    names: set[str] = set()
    for so in shared_objects:
        folder = Path(so).parent
        sources = {p for p in folder.glob("*") if p.suffix in SOURCE_SUFFIXES}
        with contextlib.suppress(OSError, UnicodeDecodeError):
            ninja = (folder / "build.ninja").read_text(errors="replace")
            sources |= {Path(p) for p in _named_inputs(ninja, folder)}
        for source in sources:
            if source.suffix not in SOURCE_SUFFIXES:
                continue
            with contextlib.suppress(OSError):
                names |= kernel_names_in(source.read_bytes()[:MAX_SOURCE_BYTES].decode("latin-1"))
    return names


def kernel_names_in(source: str) -> set[str]:
    """The names of the ``__global__`` functions a CUDA source declares."""
    return set(_GLOBAL.findall(source))


def is_declared_kernel(device_name: str, declared: set[str]) -> bool:
    """Whether a device kernel's (demangled) name is one of ``declared``, outside the
    library namespaces: ``void ns::add_kernel<float>(float const*, ...)`` -> ``add_kernel``."""
    qualified = unqualified_parts(device_name)
    if not qualified:
        return False
    *namespaces, base = qualified
    if namespaces and namespaces[0] in LIBRARY_NAMESPACES:
        return False
    return base in declared


def unqualified_parts(device_name: str) -> list[str]:
    """``void a::b::k<T>(args)`` -> ``["a", "b", "k"]`` (templates and arguments dropped)."""
    head = device_name.strip()
    if head.startswith("void "):
        head = head[5:]
    depth, out = 0, []
    for char in head:  # drop template arguments, then stop at the argument list
        if char == "<":
            depth += 1
        elif char == ">":
            depth = max(0, depth - 1)
        elif depth == 0:
            if char == "(":
                break
            out.append(char)
    text = "".join(out).strip().split(" ")[-1]  # a return type before the name
    return [p for p in text.split("::") if p]


# -- judge side ---------------------------------------------------------------------------
def authorship_evidence(raw: Any, why_missing: str | None = None) -> dict[str, Any]:
    """The verdict's ``authorship`` from the worker's record: checked, bounded, and the share
    computed here. Anything malformed is a measurement that did not happen (``why``)."""
    if raw is None:
        return _unmeasured(why_missing or "no call was profiled")
    try:
        how = raw["how"]
        if how not in HOW:
            raise ValueError(f"unknown measurement {str(how)[:40]!r}")
        kernels = []
        for entry in list(raw["kernels"])[: MAX_KERNELS + 2]:
            seconds = float(entry["device_time_s"])
            launches = int(entry["launches"])
            if not (math.isfinite(seconds) and seconds >= 0 and launches >= 0):
                raise ValueError("a kernel's time or launch count is not a plain number")
            kernels.append(
                {
                    "name": str(entry["name"])[:MAX_NAME],
                    "authored": entry["authored"] is True,
                    "device_time_s": seconds,
                    "launches": launches,
                }
            )
        notes = [str(n)[:300] for n in list(raw.get("notes", []))[:MAX_NOTES]]
    except (KeyError, TypeError, ValueError) as exc:
        return _unmeasured(f"malformed record from the worker: {type(exc).__name__}: {exc}")
    total = sum(k["device_time_s"] for k in kernels)
    authored = sum(k["device_time_s"] for k in kernels if k["authored"])
    # No kernel at all: nothing of the candidate's own ran on the device, share 0
    share = authored / total if total > 0 else 0.0
    evidence: dict[str, Any] = {
        "authored_share": round(share, 4),
        "authored_s": authored,
        "total_s": total,
        "kernels": kernels,
        "how": how,
    }
    if how == "cpu-interpreter":
        notes.append(
            "wall time under the Triton interpreter: authored Triton kernels are far slower "
            "than on a device, so this share overstates them"
        )
    if notes:
        evidence["notes"] = notes
    return evidence


def _unmeasured(why: str) -> dict[str, Any]:
    return {"authored_share": None, "kernels": [], "how": None, "why": why}


def authorship_rule(evidence: dict[str, Any], min_share: float) -> RuleResult:
    """AUTH-01: at least ``min_share`` of the call's device time in authored kernels."""
    from kernelgate.gates.base import Status  # judge side only: the worker never needs it
    from kernelgate.static.outcome import RuleResult

    share = evidence.get("authored_share")
    if share is None:
        return RuleResult(AUTH_RULE, Status.SKIPPED, f"not measured: {evidence.get('why')}")
    library = [k for k in evidence["kernels"] if not k["authored"]]
    stated = f"{share:.1%} of device time in kernels the candidate wrote"
    if share + 1e-12 < min_share:
        top = ", ".join(k["name"] for k in library[:3]) or "no kernel ran"
        return RuleResult(
            AUTH_RULE,
            Status.FAIL,
            f"{stated}, below the minimum {min_share:.0%}; most of it in: {top}",
            [k["name"] for k in library[:3]],
        )
    return RuleResult(AUTH_RULE, Status.PASS, f"{stated} (minimum {min_share:.0%})")


def default_min_share(corpus_format: str | None) -> float | None:
    """AUTH-01's threshold for a corpus format: on for kernel-writing formats, else off."""
    return DEFAULT_MIN_AUTHORED_SHARE if corpus_format in KERNEL_WRITING_FORMATS else None


def parse_min_share(value: float | None) -> float | None:
    if value is None:
        return None
    if not (isinstance(value, int | float) and 0.0 <= value <= 1.0):
        raise ValueError(f"a minimum authored share is a fraction in [0, 1], not {value!r}")
    return float(value)


__all__ = [
    "AUTH_RULE",
    "DEFAULT_MIN_AUTHORED_SHARE",
    "AuthorshipProbe",
    "authorship_evidence",
    "authorship_rule",
    "default_min_share",
]
