"""Judge side of the trust boundary: start, feed, time out and restart the worker.

Every way a candidate can misbehave in its own process (an exception, a hang, ``os._exit``,
a segfault, a sticky device fault, garbage on the protocol) comes back here as an
``ExecutionIncident``: data for RES-01, never an exception that ends the judge.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

import kernelgate
from kernelgate import bytecode
from kernelgate.audit.processes import JudgeProcess
from kernelgate.audit.zygote import ZygoteUnavailable
from kernelgate.errors import CandidateBuildError, CandidateLoadError
from kernelgate.sandbox import confine, cuda_ipc, forkserver, wire
from kernelgate.sandbox.access_trace import trace_enabled_by_default
from kernelgate.sandbox.clocks import ChoicePoint, parse_choice_points
from kernelgate.sandbox.compile_budget import (
    BUILD_EVENT,
    DEFAULT_COMPILE_TIMEOUT,
    CallClock,
    CompileBudget,
)
from kernelgate.sandbox.forbidden_watch import merge_uses, parse_uses
from kernelgate.tune.knobs import VALUES_ENV as KNOB_VALUES_ENV


@dataclass
class ExecutionIncident(Exception):
    """The candidate did not return normally from a call."""

    # "exception" | "timeout" | "crash" | "exit" | "device-fault" | "protocol", or
    # "build-timeout" (a build ran past the compile budget: a load-stage result)
    kind: str
    detail: str
    log_tail: str = ""

    def __str__(self) -> str:
        return f"{self.kind}: {self.detail}"


# Seconds the profiled call of AUTH-01 may take beyond the call's timeout: starting
# torch.profiler (Kineto, and CUPTI on a device) takes seconds the first time in a process.
PROFILER_STARTUP_SECONDS = 30.0


@dataclass
class CallResult:
    outputs: Any  # decoded value: WireTensor, tuples/lists of them, or scalars
    inputs_after: list[wire.WireTensor]
    allocations: list[tuple[wire.WireTensor, int, int]]  # (storage, guard, extent)
    seconds: float
    # the interpreter's access trace of this call (sandbox/access_trace.py), or None
    access: dict[str, Any] | None = None


@dataclass
class WorkerSession:
    """One candidate loaded in one worker process, restarted after a crash."""

    candidate: Path
    init_inputs: list[Any]
    device: str = "cpu"
    timeout: float = 60.0
    load_timeout: float = 600.0
    # Seconds of building (sandbox/compile_budget.py) on top of the deadlines above: a
    # session's own budget unless ``compile_budget`` is given, shared by every worker of one
    # verification (fresh instances take the main session's).
    compile_timeout: float = DEFAULT_COMPILE_TIMEOUT
    compile_budget: CompileBudget | None = None
    # What each exchange that built or overflowed spent (``CallClock.record``), labelled
    # with ``compile_context`` (the gate or phase the judge was in), for the evidence.
    compile_paid: list[dict[str, Any]] = field(default_factory=list)
    compile_context: str = "load"
    calls: int = 0
    starts: int = 0
    calls_since_start: int = 0  # calls made of the live worker (1: its first)
    kernels: list[dict[str, Any]] = field(default_factory=list)  # launches seen (RES-02)
    wrapper: list[str] = field(default_factory=list)  # e.g. compute-sanitizer argv (RES-01)
    exit_grace: float = 2.0  # seconds a worker may take to exit before it is killed
    # The clocks the candidate reads (sandbox/clocks.py): "real" records its timing-dependent
    # choices; CMP-01's fresh instances lie ("faster", "slower", "random:<seed>") or force
    # autotune configs ("config:<i>"); None installs nothing.
    clock_mode: str | None = "real"
    # Trace the interpreter's loads and stores (RES-01 in CPU mode, sandbox/access_trace.py);
    # off with KERNELGATE_ACCESS_TRACE=0 (``--no-access-trace``).
    access_trace: bool = field(default_factory=trace_enabled_by_default)
    # the worker's process (its launcher's, confined): started fresh, or forked by the
    # worker fork server (sandbox/forkserver.py), which has Popen's surface
    _process: JudgeProcess | None = field(default=None, repr=False)
    _to_worker: int = -1
    _from_worker: int = -1
    _log: Any = field(default=None, repr=False)
    _built_for: str | None = field(default=None, repr=False)  # see ``use_init``
    _loaded: bool = field(default=False, repr=False)  # the live worker holds the candidate
    _keep_as: str | None = field(default=None, repr=False)  # see ``keeping_outputs``
    # The worker's only writable folder (sandbox/confine.py). None: the session makes its
    # own and removes it when it ends; given: shared (fresh instances of one candidate in
    # one verification) and left to whoever made it.
    scratch: Path | None = None
    # "auto" confines the worker with whatever this machine allows, "off" does not; None:
    # the KERNELGATE_ISOLATION environment variable, else "auto".
    isolation_mode: str | None = None
    confine_skip: list[str] = field(default_factory=list)  # mechanisms not to try
    confine_connect_ports: list[int] = field(default_factory=list)  # see confine.Policy
    _own_scratch: Path | None = field(default=None, repr=False)
    _report_fd: int = field(default=-1, repr=False)
    _isolation: dict[str, Any] | None = field(default=None, repr=False)
    _confined: bool = field(default=False, repr=False)  # the live worker runs under confine
    wrapper_probe: bool = True  # False: a failed confined load is never checked by the probe
    _loosened: dict[str, str] = field(default_factory=dict, repr=False)  # mechanism: why
    # How storages cross (sandbox/cuda_ipc.py): "cuda-ipc" (device mode, where a probe of
    # each fresh worker shows it works both ways) or "pipe" (bytes in frames). Decided at
    # the first load; once IPC fails it is "pipe" for the rest of the session, and
    # ``data_path_note`` says why.
    data_path: str = cuda_ipc.PIPE
    data_path_note: str = ""
    _ipc_refused: bool = field(default=False, repr=False)
    _mappings: cuda_ipc.Mappings | None = field(default=None, repr=False)
    _last_clock: CallClock | None = field(default=None, repr=False)  # see ``_exchange``
    # FORBID-01's dynamic half (sandbox/forbidden_watch.py): the names the worker watches
    # for, and the uses its replies reported (merged, bounded)
    forbidden: tuple[str, ...] = ()
    forbidden_uses: list[dict[str, Any]] = field(default_factory=list)
    # The class the worker builds: the candidate's ``ModelNew``, or ``Model`` for a problem
    # folder's solution and for the reference when perf/ times it in a worker of its own;
    # and for a problem folder the reference's weights at given init inputs and sizes key
    # (names, tensors), which the worker loads with ``load_state_dict(strict=True)``
    model_class: str = "ModelNew"
    weights: Callable[[list[Any], str | None], tuple[list[str], list[Any]]] | None = None
    # The tuner's config (tune/): declared knob values, set as the worker's
    # KERNELGATE_KNOB_VALUES (JSON), and autotuned kernels pinned to one config each
    # (tune/pin.py, by kernel name). None: the candidate's own defaults.
    knob_values: dict[str, Any] | None = None
    autotune_pins: dict[str, int] | None = None

    # -- life cycle -----------------------------------------------------------------------
    def spawn(self) -> None:
        """Start a worker process now and load the candidate later (``start``).

        The worker's start-up (importing torch and Triton, creating a device context) then
        overlaps whatever the judge does before its first call, such as deriving the contract.
        """
        self.close()
        self.starts += 1
        self.calls_since_start = 0
        self._built_for = None  # a fresh worker builds ModelNew from ``init_inputs``
        judge_read, worker_write = wire.pipe()
        worker_read, judge_write = wire.pipe()
        if self._log is not None:
            self._log.close()
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the session
        env = bytecode.child_env(dict(os.environ))
        src = str(Path(kernelgate.__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        env.pop(KNOB_VALUES_ENV, None)  # only the tuner's config, never the judge's own
        if self.knob_values is not None:
            env[KNOB_VALUES_ENV] = json.dumps(self.knob_values, sort_keys=True)
        if self.device == "cpu":
            env["TRITON_INTERPRET"] = "1"
            env["CUDA_VISIBLE_DEVICES"] = ""
        scratch = self.scratch_folder()
        env.update(confine.scratch_env(str(scratch)))
        # -P: the worker's folder (the scratch, which the candidate can write) is never put
        # on sys.path, so a file left there cannot stand in for torch or kernelgate.
        worker = [sys.executable, "-P", "-m", "kernelgate.sandbox.worker"]
        worker += [str(worker_read), str(worker_write)]
        self._close_report()
        mode = self.mode()
        self._confined = mode != "off"
        launch = confined_command(
            worker,
            scratch=scratch,
            mode=mode,
            skip=self.confine_skip,
            wrapper=self.wrapper,
            explicit=self.isolation_mode is not None,
            connect_ports=self.confine_connect_ports,
        )
        self._isolation = launch.isolation
        self._process = self._forked(launch, env, scratch, (worker_read, worker_write))
        if self._process is None:
            self._process = subprocess.Popen(
                launch.argv,
                pass_fds=(worker_read, worker_write, *launch.pass_fds),
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=self._log,
                env=env,
                cwd=scratch,
                start_new_session=True,
            )
        self._report_fd = launch.started()
        os.close(worker_read)
        os.close(worker_write)
        self._to_worker, self._from_worker = judge_write, judge_read
        self._loaded = False

    def _forked(
        self,
        launch: ConfinedCommand,
        env: dict[str, str],
        scratch: Path,
        pipes: tuple[int, int],
    ) -> JudgeProcess | None:
        """The worker, forked by the worker fork server (sandbox/forkserver.py) with the
        confinement and environment ``launch`` would give it; None: start it fresh (a
        device the server does not serve, a wrapper, the server switched off or failing)."""
        if not forkserver.serves(self.device) or self.wrapper or launch.fresh_only:
            return None
        server = forkserver.server_for(env)
        if server is None:
            return None
        assert self._log is not None
        report = launch.report_write if launch.policy is not None else None
        try:
            return server.start_worker(
                env, scratch, launch.policy, self._log.fileno(), pipes, report
            )
        except ZygoteUnavailable as exc:
            forkserver.say_fallback(f"the worker fork server failed: {exc}")
            return None

    def mode(self) -> str:
        """ "auto" or "off" (see ``isolation_mode``); a wrong value is a clear error."""
        return isolation_mode(self.isolation_mode)

    def scratch_folder(self) -> Path:
        """The worker's private writable folder, made on first use."""
        if self.scratch is not None:
            self.scratch.mkdir(parents=True, exist_ok=True)
            return self.scratch
        if self._own_scratch is None:
            self._own_scratch = Path(tempfile.mkdtemp(prefix="kernelgate-scratch-"))
        return self._own_scratch

    @property
    def isolation(self) -> dict[str, Any] | None:
        """What confined the latest worker, as its launcher reported before the worker ran
        (None before any spawn). Read from a pipe the candidate never holds."""
        if self._report_fd >= 0:
            self._isolation = self._read_report(self._report_fd)
            self._close_report()
        if self._isolation is not None and self._loosened:
            self._isolation = with_loosened(
                self._isolation, self._loosened, off=self.isolation_mode == "off"
            )
        return self._isolation

    def _read_report(self, fd: int, timeout: float = 60.0) -> dict[str, Any]:
        return read_launcher_report(fd, lambda: self.log_tail(300), timeout)

    def _close_report(self) -> None:
        if self._report_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._report_fd)
            self._report_fd = -1

    def start(self) -> None:
        """Load the candidate in a spawned worker (a fresh one unless ``spawn`` left one
        waiting); a failure is a CandidateLoadError.

        A confined load that fails is checked against a trusted probe (``loosened``): if the
        probe fails under the same confinement on this machine, the candidate gets one more
        try with the confinement the probe needed, reported in ``isolation``'s ``missing``.
        """
        try:
            self._load()
        except CandidateLoadError:
            if not self._confined or self.wrapper_probe is False:
                raise
            loosened = loosened_confinement(self.device, self.wrapper, self.confine_skip)
            if loosened is None:
                raise  # the probe loads under this confinement: the candidate's own failure
            skip, reason = loosened
            if skip is None:
                self.isolation_mode = "off"
            else:
                self.confine_skip = skip
            self._loosened = reason
            self._load()

    def _load(self) -> None:
        if not self.alive or self._loaded:
            self.spawn()
        try:
            self._choose_data_path()
        except ExecutionIncident as incident:
            self.close()
            raise CandidateLoadError(
                f"candidate {self.candidate} could not be loaded: {incident}"
            ) from None
        blobs: list[bytes] = []
        header = {
            "op": "load",
            "candidate": str(self.candidate.resolve()),
            "device": self.device,
            "init_inputs": wire.encode_value(self.init_inputs, blobs),
        }
        if self.clock_mode:
            header["clock_mode"] = self.clock_mode
        if self.autotune_pins:
            header["autotune_pins"] = dict(self.autotune_pins)
        if self.forbidden:
            header["forbidden"] = list(self.forbidden)
        header |= self._model_header(self.init_inputs, None, blobs)
        try:
            reply, _ = self._exchange(header, blobs, self.load_timeout, op="load")
        except ExecutionIncident as incident:
            self.close()
            error = CandidateBuildError if incident.kind == "build-timeout" else CandidateLoadError
            raise error(f"candidate {self.candidate} could not be loaded: {incident}") from None
        if not reply.get("ok"):
            self.close()
            failed = self._failed_builds()
            error = CandidateBuildError if failed else CandidateLoadError
            raise error(
                f"candidate {self.candidate} failed to load{failed}: "
                f"{reply.get('error', 'unknown error')}"
            )
        merge_uses(self.forbidden_uses, parse_uses(reply.get("forbidden")))
        self._loaded = True

    # -- the data path ----------------------------------------------------------------------
    def _choose_data_path(self) -> None:
        """Probe CUDA IPC with a fresh worker, before any candidate code runs in it: the
        judge stages a pattern the worker must read, the worker hands back one the judge
        must read. Any failure sets the byte path for the rest of the session."""
        if self.device == "cpu":
            self._use_pipe("CPU mode: storages cross as bytes")
            return
        if cuda_ipc.forced_pipe():
            self._use_pipe(f"{cuda_ipc.ENV_SWITCH}={cuda_ipc.PIPE}")
            return
        if self._ipc_refused:
            return
        pattern = 0xA5
        exports = cuda_ipc.Exports(torch.device(self.device))
        try:
            staged = torch.full((4096,), pattern, dtype=torch.uint8, device=self.device)
            ref = exports.stage(staged.untyped_storage())
            assert ref is not None
            header = {"op": "ipc", "device": self.device, "pattern": pattern} | ref.to_node()
            reply, _ = self._exchange(header, [], self.load_timeout)
        except (cuda_ipc.IpcError, RuntimeError, AssertionError) as exc:
            self._use_pipe(f"IPC unavailable in the judge: {exc}")
            return
        finally:
            exports.release()
        if not reply.get("ok"):
            self._use_pipe(f"IPC failed in the worker: {str(reply.get('error'))[:300]}")
            return
        try:
            raw = self._ipc_reader()(cuda_ipc.IpcRef.parse(reply, 1 << 20))
            if raw.numel() != 4096 or not bool((raw == pattern ^ 0xFF).all()):
                raise ValueError("the worker's pattern arrived changed")
        except (cuda_ipc.IpcError, ValueError, RuntimeError) as exc:
            self._close_mappings()
            self._use_pipe(f"IPC failed in the judge: {exc}")
            return
        self.data_path, self.data_path_note = cuda_ipc.IPC, ""

    def data_path_report(self) -> dict[str, str]:
        """How storages crossed between this session's judge and worker, for the evidence's
        environment: ``path`` ("cuda-ipc" or "pipe") and, for the pipe, ``why``."""
        report = {"path": self.data_path}
        if self.data_path_note:
            report["why"] = self.data_path_note
        return report

    def _use_pipe(self, why: str) -> None:
        if self.device != "cpu":
            self._ipc_refused = True
        self.data_path, self.data_path_note = cuda_ipc.PIPE, why

    def _ipc_reader(self) -> wire.ReadRef:
        if self._mappings is None:
            self._mappings = cuda_ipc.Mappings(torch.device(self.device))
        return self._mappings.read

    def _close_mappings(self) -> None:
        if self._mappings is not None:
            with contextlib.suppress(cuda_ipc.IpcError, RuntimeError):
                self._mappings.close()

    @property
    def _reader(self) -> wire.ReadRef | None:
        """How replies' IPC references are read: only on the IPC path."""
        return self._ipc_reader() if self.data_path == cuda_ipc.IPC else None

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def close(self, *, wait: bool = True) -> None:
        """Ask the worker to exit and close the pipes; kill it after ``exit_grace`` s.

        ``wait=False``: do not wait here for it to go (a CUDA worker takes about half a
        second to tear its context down, paid by every fresh instance); a thread sees it
        out, and ``settle_retired_workers`` waits for every such thread.
        """
        if self._report_fd >= 0:
            _ = self.isolation  # keep what the launcher said about the worker that ends
        self._close_mappings()  # the worker's memory they map goes with it
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(OSError):
                wire.send_frame(self._to_worker, {"op": "exit"})
            if wait:
                _see_out(process, self.exit_grace, self._confined)
            else:
                _RETIRING.add(process, self.exit_grace, self._confined)
        for fd in (self._to_worker, self._from_worker):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._to_worker = self._from_worker = -1

    def __enter__(self) -> WorkerSession:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        self._mappings = None
        if self._log is not None:
            self._log.close()
        if self._own_scratch is not None:  # its last worker and that worker's tree are gone
            shutil.rmtree(self._own_scratch, ignore_errors=True)
            self._own_scratch = None

    # -- calls ----------------------------------------------------------------------------
    def use_init(self, init_inputs: list[Any] | None, key: str | None) -> None:
        """Make the worker's ``ModelNew`` the one built from ``init_inputs`` (None: the original).

        ``key`` names the init inputs (CMP-03 uses the rebound sizes), so consecutive calls
        at the same sizes build once. A failure to build is an ``ExecutionIncident``.
        """
        if not self.alive:
            self.start()
        if key == self._built_for:
            return
        values = self.init_inputs if key is None or init_inputs is None else init_inputs
        blobs: list[bytes] = []
        header = {"op": "construct", "init_inputs": wire.encode_value(values, blobs)}
        header |= self._model_header(values, None if values is self.init_inputs else key, blobs)
        reply, _ = self._building_exchange(header, blobs, op="construct")
        if not reply.get("ok"):
            self._built_for = "?"  # unknown state: rebuild on the next request
            self._raise_if_build_failed(reply, "ModelNew(*init_inputs)")
            raise ExecutionIncident(
                "exception",
                f"ModelNew(*init_inputs) raised: {reply.get('error')}",
                str(reply.get("traceback", "")),
            )
        merge_uses(self.forbidden_uses, parse_uses(reply.get("forbidden")))
        self._built_for = None if init_inputs is None else key

    def _model_header(
        self, init_inputs: list[Any], key: str | None, blobs: list[bytes]
    ) -> dict[str, Any]:
        """What a load or construct request says about the model to build: its class, and
        the weights to load into it (problem folders)."""
        header: dict[str, Any] = {"model_class": self.model_class}
        if self.weights is not None:
            names, tensors = self.weights(init_inputs, key)
            header["weights"] = {"names": names, "tensors": wire.encode_value(tensors, blobs)}
        return header

    def choice_points(self) -> list[ChoicePoint]:
        """The timing-dependent choice points the live worker has seen since it loaded.

        Raw data from the candidate's process, checked field by field: evidence of choices,
        and their absence no proof (a candidate can time with what no hook sees). A worker
        that is gone (it crashed, or never started) has none to give.
        """
        if not self.alive or not self._loaded:
            return []
        reply, _ = self._exchange({"op": "choices"}, [], self.timeout)
        return parse_choice_points(reply.get("choice_points")) if reply.get("ok") else []

    def compile_resources(
        self, records: list[dict[str, Any]], timeout: float = 300.0
    ) -> list[dict[str, Any]]:
        """Ask the worker to compile interpreted Triton launches offline (RES-02, CPU mode)."""
        if not self.alive:
            self.start()
        header = {"op": "resources", "records": records, "timeout": timeout}
        reply, _ = self._exchange(header, [], timeout + 30)
        results = reply.get("results") if reply.get("ok") else None
        if not isinstance(results, list):
            detail = reply.get("error", "malformed reply")
            return [{"name": r.get("name"), "error": f"worker: {detail}"} for r in records]
        return [r for r in results if isinstance(r, dict)]

    def call(
        self,
        inputs: list[Any],
        *,
        poison: int,
        guard_bytes: int,
        hold_bytes: int = 0,
        reuse_inputs: bool = False,
        side_effects: bool = True,
    ) -> CallResult:
        """Run ``ModelNew.forward(*inputs)`` once; raise ExecutionIncident if it misbehaves.

        ``side_effects``: also bring back the input storages after the call and every
        guarded allocation the call made (MEM-01's evidence). Without it only the outputs
        cross the wire: at KernelBench sizes those extra storages were most of the bytes.
        """
        if not self.alive:
            self.start()
        blobs: list[bytes] = []
        staging = cuda_ipc.Exports(torch.device(self.device))
        header = {
            "op": "call",
            "inputs": wire.encode_value(inputs, blobs, carry=self._staging_carry(staging)),
            "data_path": self.data_path,
            "poison": poison,
            "guard_bytes": guard_bytes,
            "hold_bytes": hold_bytes,
            "reuse_inputs": reuse_inputs,
            "side_effects": side_effects,
            "access_trace": self.access_trace,
        }
        if self._keep_as is not None:
            header["keep_as"] = self._keep_as
        self.calls += 1
        self.calls_since_start += 1
        started = time.monotonic()
        try:
            # a fresh instance's first call may build what no hook reports: its time past
            # the deadline is compile time (sandbox/compile_budget.py)
            reply, reply_blobs = self._building_exchange(
                header, blobs, op="call", overflow=self.calls_since_start == 1
            )
        finally:
            staging.release()  # the worker copied its inputs before it ran anything
        seconds = time.monotonic() - started
        if not reply.get("ok"):
            self._raise_if_build_failed(reply, "the call")
            raise self._refused(reply)
        read = self._reader
        try:
            outputs = wire.decode_value(reply["outputs"], reply_blobs, read)
            after = [wire.decode_value(n, reply_blobs, read) for n in reply["inputs_after"]]
            allocations = [
                (wire.decode_value(n, reply_blobs, read), int(n["guard"]), int(n["extent"]))
                for n in reply["allocations"]
            ]
        except (wire.WireError, KeyError, TypeError, ValueError) as exc:
            self._kill_current()
            raise ExecutionIncident("protocol", f"malformed reply from worker: {exc}") from None
        kernels = reply.get("kernels")
        if isinstance(kernels, list):
            self.kernels.extend(k for k in kernels if isinstance(k, dict))
        merge_uses(self.forbidden_uses, parse_uses(reply.get("forbidden")))
        access = reply.get("access")
        return CallResult(
            outputs, after, allocations, seconds, access if isinstance(access, dict) else None
        )

    # -- performance (perf/) ----------------------------------------------------------------
    def perf(
        self,
        input_sets: list[list[Any]],
        *,
        method: str,
        timeout: float,
        warmup: int = 0,
        trials: int = 0,
    ) -> dict[str, Any]:
        """Time the model in the worker (perf/timing.py) and return its raw reply, checked
        field by field: ``clock``, ``ms`` (one float per trial), ``stream_ms``, ``host_ms``,
        ``floor_ms`` (the protocol around a call that does nothing) and ``not_plain``.
        Misbehaviour is an ``ExecutionIncident``, as for ``call``."""
        if not self.alive:
            self.start()
        blobs: list[bytes] = []
        header = {
            "op": "perf",
            "inputs": wire.encode_value(input_sets, blobs),
            "method": method,
            "warmup": warmup,
            "trials": trials,
        }
        reply, _ = self._building_exchange_within(header, blobs, timeout)
        if not reply.get("ok"):
            kind = "device-fault" if reply.get("device_fault") else "exception"
            raise ExecutionIncident(kind, str(reply.get("error")), str(reply.get("traceback", "")))
        # judged: the first set only warms up, every other set is one trial
        expected = trials if method == "kernelbench" else len(input_sets) - 1
        checked: dict[str, Any] = {"clock": str(reply.get("clock", ""))[:40]}
        for key in ("ms", "stream_ms", "host_ms", "floor_ms"):
            values = reply.get(key)
            if not isinstance(values, list) or not all(
                isinstance(v, int | float) and not isinstance(v, bool) and v == v and v >= 0
                for v in values
            ):
                self._kill_current()
                raise ExecutionIncident("protocol", f"malformed perf reply: {key}")
            checked[key] = [float(v) for v in values]
        if len(checked["ms"]) != expected:
            self._kill_current()
            raise ExecutionIncident(
                "protocol", f"perf reply has {len(checked['ms'])} times for {expected} trials"
            )
        checked["not_plain"] = str(reply.get("not_plain", ""))[:500]
        return checked

    def perf_outputs(self, indices: list[int]) -> list[list[Any]]:
        """The outputs the last ``perf`` run's trials ``indices`` returned (copied in the
        worker right after each timed interval), decoded like ``call``'s."""
        reply, reply_blobs = self._exchange(
            {"op": "perf_outputs", "indices": list(indices)}, [], self.timeout
        )
        if not reply.get("ok"):
            kind = "device-fault" if reply.get("device_fault") else "exception"
            raise ExecutionIncident(kind, str(reply.get("error")), str(reply.get("traceback", "")))
        try:
            outputs = reply["outputs"]
            if not isinstance(outputs, list) or len(outputs) != len(indices):
                raise wire.WireError("wrong number of trials in the perf outputs")
            return [list(wire.decode_value(node, reply_blobs)) for node in outputs]
        except (wire.WireError, KeyError, TypeError, ValueError) as exc:
            self._kill_current()
            raise ExecutionIncident("protocol", f"malformed reply from worker: {exc}") from None

    def _building_exchange_within(
        self, header: dict[str, Any], blobs: list[bytes], timeout: float
    ) -> tuple[dict[str, Any], list[bytes]]:
        """``_building_exchange`` with its own deadline (a perf run makes many calls)."""
        try:
            return self._exchange(header, blobs, timeout, op=str(header["op"]))
        except ExecutionIncident as incident:
            if incident.kind != "build-timeout":
                raise
            raise CandidateBuildError(f"candidate {self.candidate}: {incident.detail}") from None

    def profile_authorship(self, inputs: list[Any]) -> Any:
        """The worker's authorship record of one more call on ``inputs`` (AUTH-01): raw,
        untrusted data for ``authorship.authorship_evidence``. Not counted as a call (no
        gate judges it); a failure raises ExecutionIncident as a call's would."""
        if not self.alive:
            self.start()
        blobs: list[bytes] = []
        staging = cuda_ipc.Exports(torch.device(self.device))
        header = {
            "op": "authorship",
            "inputs": wire.encode_value(inputs, blobs, carry=self._staging_carry(staging)),
            "data_path": self.data_path,
        }
        try:
            # the profiler's start-up (Kineto, CUPTI) is the harness's time, not the call's
            reply, _ = self._building_exchange(
                header, blobs, op="authorship", extra_seconds=PROFILER_STARTUP_SECONDS
            )
        finally:
            staging.release()
        if not reply.get("ok"):
            self._raise_if_build_failed(reply, "the profiled call")
            kind = "device-fault" if reply.get("device_fault") else "exception"
            raise ExecutionIncident(kind, str(reply.get("error")), str(reply.get("traceback", "")))
        return reply.get("authorship")

    # -- outputs kept across calls (ORD-02) -----------------------------------------------
    @contextlib.contextmanager
    def keeping_outputs(self, name: str) -> Iterator[None]:
        """Calls made inside keep their outputs alive in the worker under ``name``.

        The worker holds references to them, so an honest candidate's allocator cannot give
        their memory to a later call; ``kept_outputs`` reads them back, ``release_kept``
        lets them go. A candidate that writes a later answer into storage it returned before
        changes a kept output, or returns storage that overlaps one.
        """
        self._keep_as = name
        try:
            yield
        finally:
            self._keep_as = None

    def kept_outputs(
        self, names: list[str], *, release: bool = False, forget: list[str] | None = None
    ) -> dict[str, Any]:
        """The kept outputs ``names`` as they are now (decoded as ``call``'s outputs are:
        ``WireTensor``s with their storages' addresses); then ``forget`` lets those kept
        outputs go, ``release`` all of them. Misbehaviour is an ``ExecutionIncident``, as for
        ``call``."""
        if not self.alive:
            raise ExecutionIncident("protocol", "the worker holding the kept outputs is gone")
        header = {
            "op": "kept",
            "names": list(names),
            "release": release,
            "forget": list(forget or []),
            "data_path": self.data_path,
        }
        reply, reply_blobs = self._exchange(header, [], self.timeout)
        if not reply.get("ok"):
            raise self._refused(reply)
        try:
            kept = reply["kept"]
            if not isinstance(kept, dict) or sorted(kept) != sorted(names):
                raise wire.WireError(f"asked for kept outputs {names}, got {list(kept)}")
            read = self._reader
            return {name: wire.decode_value(kept[name], reply_blobs, read) for name in names}
        except (wire.WireError, KeyError, TypeError, ValueError) as exc:
            self._kill_current()
            raise ExecutionIncident("protocol", f"malformed reply from worker: {exc}") from None

    def forget_kept(self, names: list[str]) -> None:
        """Let the kept outputs ``names`` go, the others stay kept; an ``ExecutionIncident``
        if the worker misbehaves."""
        if self.alive:
            self.kept_outputs([], forget=names)

    def release_kept(self) -> None:
        """Let every kept output go (nothing to do when the worker is gone: they went with
        it); an ``ExecutionIncident`` if the worker misbehaves."""
        if self.alive:
            self.kept_outputs([], release=True)

    def _staging_carry(self, staging: cuda_ipc.Exports) -> wire.Carry | None:
        """On the IPC path, each input storage goes by handle to a copy made for this call
        only (never the judge's own tensor); one that cannot be staged goes as bytes."""
        if self.data_path != cuda_ipc.IPC:
            return None

        def carry(storage: Any) -> dict[str, Any] | None:
            try:
                ref = staging.stage(storage)
            except (cuda_ipc.IpcError, RuntimeError):
                return None
            return None if ref is None else ref.to_node()

        return carry

    @property
    def budget(self) -> CompileBudget:
        """The compile budget this session's builds are charged to (made on first use)."""
        if self.compile_budget is None:
            self.compile_budget = CompileBudget(self.compile_timeout)
        return self.compile_budget

    @property
    def compile_seconds(self) -> float:
        """Seconds this session's workers spent building (or overflowing into the budget)."""
        return round(sum(p["compile_seconds"] for p in self.compile_paid), 3)

    def _failed_builds(self) -> str:
        """ " (the build of X failed)" when the last exchange saw a build fail, else ""."""
        clock = self._last_clock
        if clock is None or not clock.failed_builds:
            return ""
        return f" (the build of {', '.join(clock.failed_builds[:3])} failed)"

    def _raise_if_build_failed(self, reply: dict[str, Any], what: str) -> None:
        """A request that failed after a build failed in it is a load-stage result."""
        failed = self._failed_builds()
        if failed:
            raise CandidateBuildError(
                f"candidate {self.candidate}: {what} raised{failed}: {reply.get('error')}"
            )

    def _building_exchange(
        self,
        header: dict[str, Any],
        blobs: list[bytes],
        *,
        op: str,
        overflow: bool = False,
        extra_seconds: float = 0.0,
    ) -> tuple[dict[str, Any], list[bytes]]:
        """``_exchange`` of a request that may build: a build that runs the compile budget
        out is a ``CandidateBuildError`` (load stage), not an execution incident.
        ``extra_seconds``: on top of the call's ``timeout``, for work that is the harness's."""
        try:
            timeout = self.timeout + extra_seconds
            return self._exchange(header, blobs, timeout, op=op, overflow=overflow)
        except ExecutionIncident as incident:
            if incident.kind != "build-timeout":
                raise
            raise CandidateBuildError(f"candidate {self.candidate}: {incident.detail}") from None

    def _exchange(
        self,
        header: dict[str, Any],
        blobs: list[bytes],
        timeout: float,
        *,
        op: str | None = None,
        overflow: bool = False,
    ) -> tuple[dict[str, Any], list[bytes]]:
        """Send one request and wait for its answer, within ``timeout`` seconds of time not
        spent building; build events on the way move the clock to the compile budget
        (``CallClock``). ``op`` names the request in ``compile_paid``."""
        clock = CallClock(timeout, self.budget, overflow=overflow)
        self._last_clock = clock
        try:
            wire.send_frame(self._to_worker, header, blobs)
            while True:
                reply, reply_blobs = wire.recv_frame(self._from_worker, clock.deadline())
                if reply.get("event") != BUILD_EVENT:
                    break
                clock.event(reply)
            return reply, reply_blobs
        except wire.PeerTimeout:
            kind, detail = clock.expiry()
            self._kill_current()
            raise ExecutionIncident(kind, detail) from None
        except (wire.PeerGone, BrokenPipeError):
            raise self._death() from None
        except wire.WireError as exc:
            self._kill_current()
            raise ExecutionIncident("protocol", str(exc)) from None
        finally:
            paid = clock.record(op or str(header.get("op")))
            if paid is not None:
                self.compile_paid.append(paid | {"at": self.compile_context})

    def _refused(self, reply: dict[str, Any]) -> ExecutionIncident:
        """The incident for a request the worker answered with an error.

        After a device fault the worker exits (code 3: its CUDA context is lost); it is
        retired here, so the next request starts a fresh one instead of meeting the dying
        process and reporting its exit as a fault of that next request.
        """
        detail, log = str(reply.get("error")), str(reply.get("traceback", ""))
        if not reply.get("device_fault"):
            return ExecutionIncident("exception", detail, log)
        self.close(wait=False)
        return ExecutionIncident("device-fault", detail, log)

    def _death(self) -> ExecutionIncident:
        process = self._process
        code = process.wait(timeout=10) if process is not None else None
        tail = self.log_tail()
        self.close()
        if code is not None and code < 0:
            name = (
                signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else -code
            )
            return ExecutionIncident("crash", f"worker killed by signal {name}", tail)
        if code == 3:
            return ExecutionIncident("device-fault", "sticky device error; worker restarted", tail)
        return ExecutionIncident("exit", f"worker exited with code {code} in mid-call", tail)

    def _kill_current(self) -> None:
        if self._process is not None:
            self._kill(self._process)
        self.close()

    def _kill(self, process: JudgeProcess) -> None:
        _kill_worker(process, self._confined)

    def log_tail(self, limit: int = 2000) -> str:
        if self._log is None:
            return ""
        self._log.seek(0, os.SEEK_END)
        size = self._log.tell()
        self._log.seek(max(0, size - limit))
        return self._log.read().decode(errors="replace")


# -- starting a process under the confinement launcher (the worker, the audit's old check) --


def _kill_worker(process: JudgeProcess, confined: bool) -> None:
    if confined:
        # The launcher first (SIGTERM): it kills the worker and, without a PID
        # namespace, every process the worker's tree left behind. Then the whole group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=2)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)


def _see_out(process: JudgeProcess, grace: float, confined: bool) -> None:
    """Wait ``grace`` seconds for a worker told to exit, then kill it and its group."""
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        _kill_worker(process, confined)


class _Retiring:
    """Workers told to exit that nobody waits for in line (``close(wait=False)``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def add(self, process: JudgeProcess, grace: float, confined: bool) -> None:
        thread = threading.Thread(
            target=_see_out, args=(process, grace, confined), name="retire-worker", daemon=True
        )
        thread.start()
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]

    def settle(self) -> None:
        with self._lock:
            threads, self._threads = self._threads, []
        for thread in threads:
            thread.join()


_RETIRING = _Retiring()


def settle_retired_workers() -> None:
    """Return once every worker closed with ``wait=False`` has exited or been killed; a
    verification calls it before its verdict, so none outlives the evidence."""
    _RETIRING.settle()


def isolation_mode(explicit: str | None = None) -> str:
    """ "auto" (confine with whatever this machine allows) or "off": ``explicit``, else the
    KERNELGATE_ISOLATION environment variable, else "auto"; a wrong value is a clear error."""
    mode = explicit or os.environ.get(confine.ENV_SWITCH) or "auto"
    if mode not in ("auto", "off"):
        raise CandidateLoadError(
            f"isolation mode {mode!r} is not known: set {confine.ENV_SWITCH} to auto or off"
        )
    return mode


@dataclass
class ConfinedCommand:
    """A command as the judge starts it: under ``confine.py`` (mode "auto") or as it is.

    Pass ``pass_fds`` to ``Popen`` beside the command's own descriptors, then call
    ``started``: the launcher's end of its report pipe must not stay open in the judge, or
    a launcher that dies before reporting would look like one still about to report.
    """

    argv: list[str]
    pass_fds: tuple[int, ...]
    isolation: dict[str, Any] | None  # the report of an unconfined start; None: read it
    _report_read: int = -1
    _report_write: int = -1
    # the launcher's policy (None: unconfined), for a worker fork server that applies it
    policy: confine.Policy | None = None
    # True where ``argv`` does more than the launcher and the worker (a wrapper, the
    # die-with-caller shim): only a fresh process runs it as it is
    fresh_only: bool = False

    @property
    def report_write(self) -> int:
        """The launcher's end of the report pipe (-1: none), until ``started``."""
        return self._report_write

    def started(self) -> int:
        """Close the launcher's end in the judge; returns the judge's end (-1: none)."""
        if self._report_write >= 0:
            os.close(self._report_write)
            self._report_write = -1
        return self._report_read


# Run before a launcher that must die with the thread that starts it: PR_SET_PDEATHSIG
# (kept across execve), a check that the starter is still there, then exec of the rest.
# Where prctl is missing (not Linux) it only execs: the child's pipe watcher remains.
DIE_WITH_CALLER = (
    "import ctypes, os, sys\n"
    "try:\n"
    "    ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)\n"
    "except (OSError, AttributeError):\n"
    "    pass\n"
    "os.getppid() == int(sys.argv[1]) or os._exit(1)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def confined_command(
    command: list[str],
    *,
    scratch: Path,
    mode: str,
    skip: list[str],
    wrapper: list[str] | None = None,
    explicit: bool = False,
    die_with_caller: bool = False,
    connect_ports: list[int] | None = None,
) -> ConfinedCommand:
    """``command`` (after ``wrapper``, e.g. compute-sanitizer) under the confinement
    launcher with ``scratch`` as the only writable folder and ``skip`` left untried; with
    ``mode`` "off", the command as it is and a report saying so (``explicit``: turned off by
    the caller rather than by KERNELGATE_ISOLATION). Start it with ``cwd=scratch`` and
    ``confine.scratch_env(scratch)`` in its environment.

    ``connect_ports``: TCP ports the command may still connect to (compute-sanitizer's
    frontend, which runs outside the sandbox).

    ``die_with_caller``: the launcher is SIGKILLed when the thread that starts it dies (a
    small trusted shim, ``DIE_WITH_CALLER``, sets ``PR_SET_PDEATHSIG`` and becomes the
    launcher), and the launcher's child takes the confined tree with it. Only for a caller
    whose starting thread outlives the command (the audit's old check, started and waited
    for by the judge's main thread); a worker prefetched from a short-lived thread would die
    with that thread.
    """
    if mode == "off":
        reason = "turned off" if explicit else f"turned off ({confine.ENV_SWITCH}=off)"
        return ConfinedCommand(
            [*(wrapper or []), *command],
            (),
            confine.turned_off(reason),
            fresh_only=bool(wrapper),
        )
    report_read, report_write = os.pipe()
    policy = confine.Policy(
        scratch=str(scratch),
        report_fd=report_write,
        skip=list(skip),
        connect_ports=list(connect_ports or []),
    )
    launcher = [sys.executable, "-P", confine.__file__, policy.to_json(), "--"]
    shim = [sys.executable, "-I", "-S", "-c", DIE_WITH_CALLER, str(os.getpid())]
    return ConfinedCommand(
        [*(shim if die_with_caller else []), *(wrapper or []), *launcher, *command],
        (report_write,),
        None,
        report_read,
        report_write,
        policy=policy,
        fresh_only=die_with_caller or bool(wrapper),
    )


def read_launcher_report(
    fd: int, log_tail: Callable[[], str], timeout: float = 60.0
) -> dict[str, Any]:
    """The launcher's report of what confines its command, read from the pipe only the
    judge holds (``ConfinedCommand.started``); a launcher that exits or hangs before
    reporting gives a report that says so, with ``log_tail()`` of the command's log."""
    data = b""
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return confine.turned_off("the launcher did not report in time")
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    try:
        report = json.loads(data.decode())
        if not isinstance(report, dict) or not isinstance(report.get("in_force"), list):
            raise ValueError("not a report")
        return confine.Report.from_dict(report).to_dict()
    except (ValueError, UnicodeDecodeError):
        reason = "the launcher exited before reporting" if not data else "garbled report"
        return confine.turned_off(f"{reason}; log: {log_tail()!r}")


def with_loosened(
    isolation: dict[str, Any], loosened: dict[str, str], *, off: bool
) -> dict[str, Any]:
    """``isolation`` with each mechanism a trusted probe made the judge drop
    (``loosened_confinement``) reported missing for that reason: never a silent loosening."""
    report = confine.Report.from_dict(isolation)
    for name, reason in loosened.items():
        if name in report.missing or off:
            report.lack(name, reason)
    return report.to_dict()


# What a trusted probe needed, per device, wrapper and starting confinement: found once per
# judge process. Value: None (the probe loads as confined: nothing to loosen) or the skip
# list that worked (None inside: confinement off) with the reasons to report.
_LOOSENED: dict[tuple[str, tuple[str, ...], tuple[str, ...]], Any] = {}
PROBE = Path(__file__).with_name("probe.py")


def _probe_error(device: str, wrapper: list[str], skip: list[str], mode: str) -> str:
    """Load the trusted probe under the given confinement: "" if it loads, else why not.
    Its scratch folder is its own: nothing a failed candidate left can sway it."""
    session = WorkerSession(PROBE, [], device=device, wrapper=list(wrapper), isolation_mode=mode)
    session.confine_skip = list(skip)
    session.wrapper_probe = False
    try:
        with session:
            return ""
    except CandidateLoadError as exc:
        return str(exc)[-300:]


def loosened_confinement(
    device: str, wrapper: list[str], skip: list[str]
) -> tuple[list[str] | None, dict[str, str]] | None:
    """The confinement a trusted probe needs on this machine when ``skip`` is too strict:
    None if the probe loads as it is (or fails even unconfined: not confinement's fault);
    else (skip list, None for off; the reasons to report for each dropped mechanism)."""
    key = (device, tuple(wrapper), tuple(skip))
    if key not in _LOOSENED:
        found: Any = None
        error = _probe_error(device, wrapper, skip, "auto")
        if error:
            # first without the filesystem restrictions (what a device driver is likeliest
            # to trip over), the namespaces kept; then unconfined
            filesystem = ["landlock-fs", "readonly-root"]
            dropped = [*filesystem, "landlock-net", "landlock-signals"]
            if not _probe_error(device, wrapper, [*skip, *filesystem], "auto"):
                why = f"dropped: a trusted probe worker failed under it here ({error})"
                found = ([*skip, *filesystem], dict.fromkeys(dropped, why))
            elif not _probe_error(device, wrapper, skip, "off"):
                why = f"turned off: a trusted probe worker failed under confinement ({error})"
                found = (None, dict.fromkeys(confine.MECHANISMS, why))
                found[1].pop("private-scratch")
        _LOOSENED[key] = found
    return _LOOSENED[key]
