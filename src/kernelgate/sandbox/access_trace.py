"""The Triton interpreter's access trace (RES-01 in CPU mode).

Under ``TRITON_INTERPRET=1`` every ``tl.load``, ``tl.store`` and atomic of a candidate's
kernel goes through one object of Triton's, ``interpreter_builder``, as numpy arrays of
addresses and masks, one program instance at a time. The worker wraps those methods (and
the grid executor, to know where a launch starts and ends and what it was passed), so for
each active lane it knows the program id, the address, the element size and the source
line, and judges three things a GPU would hide or make timing-dependent:

* **out of bounds**: an address outside every live allocation of the call: the view of
  each input the judge sent and of each poisoned ``torch.empty`` (their guard bands count
  as outside), the whole storage of any other tensor the launch was passed. A lane that
  lies outside every storage the worker knows (host memory the interpreter would read or
  write: heap, other objects) is masked off *before* the interpreter touches it; a lane in
  a guard band still runs (MEM-01 judges what it did) and is reported.
* **write-write race**: the same element address stored by two program instances of one
  launch without an atomic. The interpreter runs programs one after another, so the last
  writer always wins there; on a GPU the winner depends on timing.
* **uninitialised read**: a load (or an atomic's read) of memory of a poisoned
  ``torch.empty`` allocation that no traced store wrote in this call and whose bytes still
  hold the poison (a torch op that wrote it leaves other bytes): scratch or output read
  before it is written.

What it cannot see (docs/design.md, "The access trace"): inline assembly and libdevice
(the interpreter refuses them: the call fails instead), memory touched by torch ops or C++
between launches (only the values tell), races between launches or streams, reads racing
with writes of another program, overlapping stores of different element sizes (element
start addresses are compared), and a hostile candidate that restores Triton's methods: the
trace runs in the candidate's own process and is evidence against mistakes, not tampering.

The worker owns one ``AccessTrace``; ``install`` is called at load, after the offline
compiler is forked, and says ``skipped`` with the reason when Triton's internals are not
the ones this module knows. Each call runs inside ``call(...)``; ``report()`` is the JSON
the judge receives. The judge side (``AccessLog``) gathers the reports of every gate's
calls for RES-01.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from kernelgate.sandbox.poison import PoisonAllocator, poison_byte
from kernelgate.sandbox.wire import view_extent

TRACE_ENV = "KERNELGATE_ACCESS_TRACE"  # "0" switches the trace off (``--no-access-trace``)
MAX_FINDINGS = 12  # distinct findings (kind, kernel, source line) kept per call
MAX_RACE_ELEMENTS = 1 << 24  # stored elements kept per launch for the race check
_THIS_FILE = os.path.abspath(__file__)
_BUILDER_METHODS = (
    "create_masked_load",
    "create_masked_store",
    "create_atomic_rmw",
    "create_atomic_cas",
    "set_grid_idx",
)


def trace_enabled_by_default() -> bool:
    """Whether sessions trace (the judge's ``KERNELGATE_ACCESS_TRACE``, on unless "0")."""
    return os.environ.get(TRACE_ENV, "1") != "0"


@dataclass
class _Region:
    """A byte range ``[start, end)`` with a name for the reports."""

    start: int
    end: int
    label: str
    itemsize: int = 1


@dataclass
class _Poisoned:
    """A poisoned allocation: its bytes, which of them traced stores wrote, its poison."""

    start: int
    raw: np.ndarray  # uint8 view of the whole storage (guards included)
    written: np.ndarray  # bool per byte
    byte: int


@dataclass
class _Launch:
    """One kernel launch: what it may touch and the stores kept for the race check."""

    kernel: str
    live: list[_Region]
    live_starts: np.ndarray
    live_ends: np.ndarray
    owned_starts: np.ndarray
    owned_ends: np.ndarray
    store_addresses: list[np.ndarray] = field(default_factory=list)
    store_programs: list[np.ndarray] = field(default_factory=list)
    store_sites: list[np.ndarray] = field(default_factory=list)
    stored: int = 0
    race_truncated: bool = False


def _union(regions: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, merged ``[start, end)`` intervals as two uint64 arrays."""
    merged: list[list[int]] = []
    for start, end in sorted(r for r in regions if r[1] > r[0]):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    starts = np.array([m[0] for m in merged], dtype=np.uint64)
    ends = np.array([m[1] for m in merged], dtype=np.uint64)
    return starts, ends


def _within(addresses: np.ndarray, size: int, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Which ``[a, a + size)`` lie wholly inside one of the merged intervals."""
    if starts.size == 0:
        return np.zeros(addresses.shape, dtype=bool)
    index = np.searchsorted(starts, addresses, side="right").astype(np.int64) - 1
    safe = np.maximum(index, 0)
    return (index >= 0) & (addresses + np.uint64(size) <= ends[safe])


def _storage_range(tensor: torch.Tensor) -> tuple[int, int]:
    storage = tensor.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def _view_range(tensor: torch.Tensor) -> tuple[int, int]:
    extent = view_extent(tuple(tensor.shape), tuple(tensor.stride()))
    return tensor.data_ptr(), tensor.data_ptr() + extent * tensor.element_size()


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)


class AccessTrace:
    """Wraps the interpreter's memory operations; judges each call's accesses."""

    def __init__(self) -> None:
        self.skipped: str | None = "not installed"
        self._builder: Any = None
        self._handle: Any = None  # the interpreter's TensorHandle class
        self._int1: Any = None  # tl.int1, the dtype of a mask handle
        self._on = False  # inside ``call`` with tracing asked for
        self._launch: _Launch | None = None
        self._inputs: list[tuple[torch.Tensor, str]] = []
        self._allocator: PoisonAllocator | None = None
        self._poisoned: dict[int, _Poisoned] = {}
        self._findings: dict[tuple[str, str, str, str], dict[str, Any]] = {}
        self._dropped = 0  # distinct findings past MAX_FINDINGS
        self._counts = {"launches": 0, "load": 0, "store": 0, "atomic": 0, "stopped": 0}
        self._notes: list[str] = []
        self._sites: dict[tuple[str, int], int] = {}
        self._site_text: list[str] = []

    # -- installation ---------------------------------------------------------------------
    def install(self) -> None:
        """Wrap the interpreter's load/store/atomic methods and its grid executor.

        Looked up by name in the installed Triton; anything missing leaves the trace
        ``skipped`` with what was not found, and the worker runs untraced.
        """
        try:
            import triton
            from triton.runtime import interpreter
        except Exception as exc:
            self.skipped = f"Triton's interpreter not importable: {type(exc).__name__}: {exc}"
            return
        version = getattr(triton, "__version__", "?")
        builder = getattr(interpreter, "interpreter_builder", None)
        executor = getattr(interpreter, "GridExecutor", None)
        handle = getattr(interpreter, "TensorHandle", None)
        missing = [m for m in _BUILDER_METHODS if not callable(getattr(builder, m, None))]
        if builder is None or executor is None or handle is None or missing:
            what = missing or ["interpreter_builder, GridExecutor or TensorHandle"]
            self.skipped = f"triton {version}: interpreter internals not found ({', '.join(what)})"
            return
        if "__call__" not in vars(executor):  # its own launch loop, not object's
            self.skipped = f"triton {version}: GridExecutor.__call__ not found"
            return
        self._builder, self._handle = builder, handle
        self._int1 = triton.language.int1
        self._wrap_builder(builder)
        self._wrap_executor(executor)
        self.skipped = None

    def _wrap_builder(self, builder: Any) -> None:
        load, store = builder.create_masked_load, builder.create_masked_store
        rmw, cas = builder.create_atomic_rmw, builder.create_atomic_cas
        trace = self

        def create_masked_load(ptrs: Any, mask: Any, other: Any, *rest: Any) -> Any:
            if trace._launch is not None:
                mask = trace._access("load", ptrs, mask)
            return load(ptrs, mask, other, *rest)

        def create_masked_store(ptrs: Any, value: Any, mask: Any, *rest: Any) -> Any:
            if trace._launch is not None:
                mask = trace._access("store", ptrs, mask)
            return store(ptrs, value, mask, *rest)

        def create_atomic_rmw(op: Any, ptr: Any, val: Any, mask: Any, *rest: Any) -> Any:
            if trace._launch is not None:
                mask = trace._access("atomic", ptr, mask)
            return rmw(op, ptr, val, mask, *rest)

        def create_atomic_cas(ptr: Any, cmp: Any, val: Any, *rest: Any) -> Any:
            if trace._launch is not None:
                everywhere = trace._handle(np.ones(np.shape(ptr.data), dtype=bool), trace._int1)
                kept = trace._access("atomic", ptr, everywhere)
                if not np.asarray(kept.data).all():  # cas has no mask to narrow
                    raise RuntimeError(
                        "access trace: atomic_cas outside every allocation, stopped before "
                        "the interpreter touched host memory"
                    )
            return cas(ptr, cmp, val, *rest)

        builder.create_masked_load = create_masked_load
        builder.create_masked_store = create_masked_store
        builder.create_atomic_rmw = create_atomic_rmw
        builder.create_atomic_cas = create_atomic_cas

    def _wrap_executor(self, executor: type) -> None:
        original = executor.__call__
        trace = self

        def __call__(self: Any, *args: Any, **kwargs: Any) -> Any:
            if not trace._on or trace._launch is not None:
                return original(self, *args, **kwargs)
            try:
                trace._begin(self, args, kwargs)
            except Exception as exc:  # bookkeeping must never break a launch
                trace._note(f"launch not traced: {type(exc).__name__}: {exc}")
                return original(self, *args, **kwargs)
            try:
                return original(self, *args, **kwargs)
            finally:
                trace._end()

        executor.__call__ = __call__  # type: ignore[method-assign]

    # -- one call -------------------------------------------------------------------------
    @contextlib.contextmanager
    def call(self, enabled: bool, inputs: list[Any], allocator: PoisonAllocator) -> Iterator[None]:
        """Trace the launches made inside (when ``enabled`` and installed)."""
        self._reset()
        self._on = enabled and self.skipped is None
        self._inputs = [(t, f"input {i}") for i, t in enumerate(_tensors(inputs))]
        self._allocator = allocator
        try:
            yield
        finally:
            self._on = False
            self._launch = None
            self._inputs, self._allocator = [], None
            self._poisoned = {}

    def _reset(self) -> None:
        self._findings, self._dropped, self._notes = {}, 0, []
        self._counts = dict.fromkeys(self._counts, 0)

    def report(self, enabled: bool) -> dict[str, Any]:
        """The last call's trace, JSON-ready: counts, findings and notes, or why none ran."""
        if not enabled:
            return {"traced": False, "why": "switched off by the judge"}
        if self.skipped is not None:
            return {"traced": False, "why": self.skipped}
        return {
            "traced": True,
            **self._counts,
            "findings": list(self._findings.values()),
            "findings_dropped": self._dropped,
            "notes": self._notes[:8],
        }

    def _note(self, text: str) -> None:
        if len(self._notes) < 32:
            self._notes.append(text)

    # -- launches -------------------------------------------------------------------------
    def _begin(self, executor: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        names = list(getattr(executor, "arg_names", []))
        named = list(zip(names, args, strict=False)) + list(kwargs.items())
        guarded: dict[int, _Region] = {}
        owned: list[tuple[int, int]] = []
        for tensor, label in self._inputs:
            start, end = _view_range(tensor)
            guarded[tensor.untyped_storage().data_ptr()] = _Region(
                start, end, label, tensor.element_size()
            )
            owned.append(_storage_range(tensor))
        allocations = list(self._allocator.allocations) if self._allocator is not None else []
        for i, allocation in enumerate(allocations):
            base = allocation.base
            size = base.element_size()
            start = base.data_ptr() + allocation.guard * size
            end = start + allocation.extent * size
            guarded[base.untyped_storage().data_ptr()] = _Region(
                start, end, f"torch.empty allocation {i}", size
            )
            owned.append(_storage_range(base))
            self._track_poison(base)
        live = list(guarded.values())
        for name, value in named:
            tensor = getattr(value, "base", value)  # TensorWrapper / reinterpret views
            if not isinstance(tensor, torch.Tensor) or tensor.device.type != "cpu":
                continue
            storage = tensor.untyped_storage().data_ptr()
            known = guarded.get(storage)
            region = (
                _Region(known.start, known.end, f"{name} ({known.label})", tensor.element_size())
                if known is not None
                else _Region(*_storage_range(tensor), name, tensor.element_size())
            )
            live.insert(0, region)  # the launch's own names first in reports
            owned.append(_storage_range(tensor))
        live_starts, live_ends = _union([(r.start, r.end) for r in live])
        owned_starts, owned_ends = _union(owned + [(r.start, r.end) for r in live])
        kernel = getattr(getattr(executor, "fn", None), "__name__", "?")
        self._launch = _Launch(kernel, live, live_starts, live_ends, owned_starts, owned_ends)
        self._counts["launches"] += 1

    def _track_poison(self, base: torch.Tensor) -> None:
        start, end = _storage_range(base)
        if start in self._poisoned or self._allocator is None:
            return
        # a view, not torch.empty: the poison allocator is active and would add to its list
        raw = base.detach().reshape(-1).view(torch.uint8).numpy()
        byte = poison_byte(base.dtype, self._allocator._byte)
        self._poisoned[start] = _Poisoned(start, raw, np.zeros(end - start, dtype=bool), byte)

    def _end(self) -> None:
        launch, self._launch = self._launch, None
        if launch is None or not launch.store_addresses:
            return
        addresses = np.concatenate(launch.store_addresses)
        programs = np.concatenate(launch.store_programs)
        sites = np.concatenate(launch.store_sites)
        order = np.argsort(addresses, kind="stable")
        addresses, programs, sites = addresses[order], programs[order], sites[order]
        clash = (addresses[1:] == addresses[:-1]) & (programs[1:] != programs[:-1])
        if launch.race_truncated:
            self._note(f"{launch.kernel}: race check covered the first {MAX_RACE_ELEMENTS} stores")
        if not clash.any():
            return
        first = int(np.argmax(clash))
        raced = np.unique(addresses[1:][clash])
        grid = tuple(self._builder.grid_dim)
        self._find(
            "write-write race",
            "store",
            launch.kernel,
            self._site_text[int(sites[first + 1])],
            lanes=int(raced.size),
            example={
                "address": self._describe(launch, int(addresses[first]), 1),
                "programs": [
                    _unravel(int(programs[first]), grid),
                    _unravel(int(programs[first + 1]), grid),
                ],
                "first_store": self._site_text[int(sites[first])],
                "addresses_raced": int(raced.size),
            },
        )

    # -- accesses -------------------------------------------------------------------------
    def _access(self, op: str, ptrs: Any, mask: Any) -> Any:
        """Judge one memory operation's active lanes; the mask, narrowed where a lane lies
        outside every storage the worker knows (never run: host memory)."""
        launch = self._launch
        assert launch is not None
        try:
            return self._judge(launch, op, ptrs, mask)
        except Exception as exc:  # a bug here must not pass for the candidate's fault
            self._note(f"{op} not traced: {type(exc).__name__}: {exc}")
            return mask

    def _judge(self, launch: _Launch, op: str, ptrs: Any, mask: Any) -> Any:
        addresses = np.asarray(ptrs.data)
        if addresses.dtype != np.uint64:
            addresses = addresses.astype(np.uint64)
        active = np.broadcast_to(np.asarray(mask.data, dtype=bool), addresses.shape)
        element = ptrs.get_element_ty()
        size = max(1, int(getattr(element, "primitive_bitwidth", 8)) // 8)
        lanes = addresses[active]
        self._counts[op] += int(lanes.size)
        if lanes.size == 0:
            return mask
        inside = _within(lanes, size, launch.live_starts, launch.live_ends)
        result = mask
        if not inside.all():
            outside = lanes[~inside]
            wild = ~_within(outside, size, launch.owned_starts, launch.owned_ends)
            where = self._describe(launch, int(outside[0]), size)
            self._find(
                "out-of-bounds",
                op,
                launch.kernel,
                self._site(),
                lanes=int(outside.size),
                example={
                    "address": where,
                    "program": list(self._builder.grid_idx),
                    "lanes": int(outside.size),
                    "stopped": int(wild.sum()),
                },
            )
            if wild.any():
                self._counts["stopped"] += int(wild.sum())
                keep = np.ones(lanes.shape, dtype=bool)
                keep[np.flatnonzero(~inside)[wild]] = False
                narrowed = active.copy()
                narrowed[active] = keep
                result = self._handle(narrowed, mask.dtype)
            lanes = lanes[inside]
        if op in ("load", "atomic"):
            self._uninitialised(launch, op, lanes, size)
        if op in ("store", "atomic"):
            self._mark_written(lanes, size)
        if op == "store":
            self._keep_for_races(launch, lanes)
        return result

    def _poisoned_lanes(
        self, lanes: np.ndarray, size: int
    ) -> Iterator[tuple[_Poisoned, np.ndarray, np.ndarray]]:
        """For each poisoned allocation some lanes fall in: it, those lanes' positions in
        ``lanes`` and their byte offsets (lanes x size) into its storage."""
        for poisoned in self._poisoned.values():
            start = np.uint64(poisoned.start)
            end = np.uint64(poisoned.start + poisoned.written.size)
            hit = (lanes >= start) & (lanes + np.uint64(size) <= end)
            if hit.any():
                positions = np.flatnonzero(hit)
                offsets = (lanes[hit] - start).astype(np.int64)
                yield poisoned, positions, offsets[:, None] + np.arange(size)

    def _uninitialised(self, launch: _Launch, op: str, lanes: np.ndarray, size: int) -> None:
        for poisoned, positions, offsets in self._poisoned_lanes(lanes, size):
            unwritten = ~poisoned.written[offsets].all(axis=1)
            still_poison = (poisoned.raw[offsets] == poisoned.byte).all(axis=1)
            bad = unwritten & still_poison
            if bad.any():
                address = int(lanes[positions[np.argmax(bad)]])
                self._find(
                    "uninitialised read",
                    op,
                    launch.kernel,
                    self._site(),
                    lanes=int(bad.sum()),
                    example={
                        "address": self._describe(launch, address, size),
                        "program": list(self._builder.grid_idx),
                        "lanes": int(bad.sum()),
                        "poison": f"0x{poisoned.byte:02x}",
                    },
                )

    def _mark_written(self, lanes: np.ndarray, size: int) -> None:
        for poisoned, _, offsets in self._poisoned_lanes(lanes, size):
            poisoned.written[offsets] = True

    def _keep_for_races(self, launch: _Launch, lanes: np.ndarray) -> None:
        if launch.race_truncated or lanes.size == 0:
            return
        if launch.stored + lanes.size > MAX_RACE_ELEMENTS:
            launch.race_truncated = True
            return
        x, y, z = self._builder.grid_idx
        nx, ny, _ = self._builder.grid_dim
        program = x + nx * (y + ny * z)
        launch.store_addresses.append(np.array(lanes, dtype=np.uint64))
        launch.store_programs.append(np.full(lanes.size, program, dtype=np.int64))
        site = self._site_index(self._frame_site())
        launch.store_sites.append(np.full(lanes.size, site, dtype=np.int32))
        launch.stored += int(lanes.size)

    # -- reports --------------------------------------------------------------------------
    def _find(
        self, kind: str, op: str, kernel: str, site: str, *, lanes: int, example: dict[str, Any]
    ) -> None:
        key = (kind, op, kernel, site)
        found = self._findings.get(key)
        if found is not None:
            found["occurrences"] += 1
            found["lanes"] += lanes
            return
        if len(self._findings) >= MAX_FINDINGS:
            self._dropped += 1
            return
        self._findings[key] = {
            "kind": kind,
            "op": op,
            "kernel": kernel,
            "line": site,
            "occurrences": 1,
            "lanes": lanes,
            "first": example,
        }

    @staticmethod
    def _describe(launch: _Launch, address: int, size: int) -> str:
        """Where ``address`` lies relative to the nearest live region, in its elements."""
        best: tuple[int, _Region] | None = None
        for region in launch.live:
            distance = (
                0
                if region.start <= address < region.end
                else min(abs(address - region.start), abs(address - region.end))
            )
            if best is None or distance < best[0]:
                best = (distance, region)
        if best is None:
            return f"0x{address:x} (no live allocation)"
        region = best[1]
        itemsize = region.itemsize or size
        offset = (address - region.start) // itemsize
        extent = (region.end - region.start) // itemsize
        where = (
            "inside"
            if 0 <= offset < extent
            else f"{offset - extent + 1} past its end"
            if offset >= extent
            else f"{-offset} before its start"
        )
        return f"{region.label} element {offset} of {extent} ({where})"

    def _frame_site(self) -> tuple[str, int]:
        """The candidate's source line of the access: the first frame outside Triton and
        this module (the interpreter compiles kernels under their own file name)."""
        triton_dir = os.path.dirname(sys.modules["triton"].__file__ or "")
        frame = sys._getframe(1)
        while frame is not None:
            name = frame.f_code.co_filename
            if not name.startswith(triton_dir) and os.path.abspath(name) != _THIS_FILE:
                return name, frame.f_lineno
            frame = frame.f_back  # type: ignore[assignment]
        return "?", 0

    def _site_index(self, site: tuple[str, int]) -> int:
        if site not in self._sites:
            text = linecache.getline(site[0], site[1]).strip()
            self._sites[site] = len(self._site_text)
            self._site_text.append(f"{os.path.basename(site[0])}:{site[1]}: {text}"[:200])
        return self._sites[site]

    def _site(self) -> str:
        return self._site_text[self._site_index(self._frame_site())]


def _unravel(program: int, grid: tuple[int, ...]) -> list[int]:
    nx, ny = grid[0], grid[1]
    return [program % nx, (program // nx) % ny, program // (nx * ny)]


MAX_LOGGED = 24  # distinct findings RES-01 keeps over a whole verification


@dataclass
class AccessLog:
    """The judge's gathering of every traced call's report, for RES-01.

    Findings are merged by (kind, operation, kernel, source line) over all gates' calls;
    each keeps the first call it was seen in (gate, case, seed: what replays it).
    """

    traced_calls: int = 0
    untraced: dict[str, int] = field(default_factory=dict)  # why -> calls
    totals: dict[str, int] = field(default_factory=dict)  # launches, load, store, ...
    findings: list[dict[str, Any]] = field(default_factory=list)
    dropped: int = 0
    notes: list[str] = field(default_factory=list)

    def add(self, gate: str, case: str, seed: int, report: dict[str, Any] | None) -> None:
        """One call's report (``None``: a worker that sent none, e.g. an older one)."""
        if report is None or not report.get("traced"):
            why = "no report" if report is None else str(report.get("why", "?"))
            self.untraced[why] = self.untraced.get(why, 0) + 1
            return
        self.traced_calls += 1
        for key in ("launches", "load", "store", "atomic", "stopped"):
            self.totals[key] = self.totals.get(key, 0) + int(report.get(key, 0))
        self.dropped += int(report.get("findings_dropped", 0))
        for note in report.get("notes", []):
            if note not in self.notes and len(self.notes) < 8:
                self.notes.append(str(note))
        for finding in report.get("findings", []):
            self._merge(gate, case, seed, finding)

    def _merge(self, gate: str, case: str, seed: int, finding: dict[str, Any]) -> None:
        key = tuple(finding.get(k) for k in ("kind", "op", "kernel", "line"))
        for kept in self.findings:
            if tuple(kept.get(k) for k in ("kind", "op", "kernel", "line")) == key:
                kept["calls"] += 1
                kept["lanes"] += int(finding.get("lanes", 0))
                _add_site(kept, gate, case)
                return
        if len(self.findings) >= MAX_LOGGED:
            self.dropped += 1
            return
        kept = {**finding, "calls": 1, "gate": gate, "case": case, "seed": seed, "sites": []}
        _add_site(kept, gate, case)
        self.findings.append(kept)

    def summary(self) -> str:
        """One line: what the trace covered, or why it did not run."""
        if not self.traced_calls:
            whys = "; ".join(sorted(self.untraced)) or "no candidate call"
            return f"access trace not run: {whys}"
        totals = self.totals
        line = (
            f"access trace: {self.traced_calls} calls, {totals.get('launches', 0)} launches, "
            f"{totals.get('load', 0)} load / {totals.get('store', 0)} store / "
            f"{totals.get('atomic', 0)} atomic lanes"
        )
        if totals.get("stopped"):
            line += f", {totals['stopped']} lanes outside every allocation stopped"
        untraced = sum(self.untraced.values())
        if untraced:
            line += f"; {untraced} calls untraced ({'; '.join(sorted(self.untraced))})"
        return line

    @staticmethod
    def describe(finding: dict[str, Any]) -> str:
        """A finding in one line: kind, kernel, line, first program and address."""
        first = finding.get("first", {})
        programs = first.get("programs") or [first.get("program")]
        who = " and ".join(f"program {tuple(p)}" for p in programs if p is not None)
        return (
            f"{finding.get('kind')} ({finding.get('op')}) in {finding.get('kernel')} at "
            f"{finding.get('line')}: {who}, {first.get('address')}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "traced_calls": self.traced_calls,
            "untraced": dict(self.untraced),
            "totals": dict(self.totals),
            "findings": self.findings,
            "findings_dropped": self.dropped,
            "notes": self.notes,
        }


MAX_SITES = 16  # (gate, case) pairs kept a finding; past them ``sites_dropped`` counts


def _add_site(finding: dict[str, Any], gate: str, case: str) -> None:
    """Where a finding was seen, each (gate, case) once: whether a narrowed domain leaves it
    out (domain.py) depends on every case it happened in, not on the first."""
    site = [gate, case]
    if site in finding["sites"]:
        return
    if len(finding["sites"]) >= MAX_SITES:
        finding["sites_dropped"] = finding.get("sites_dropped", 0) + 1
        return
    finding["sites"].append(site)
