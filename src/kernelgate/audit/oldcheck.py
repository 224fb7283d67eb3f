"""The source harness's own check, re-run beside the contract: KernelBench's correctness test.

Why re-run it rather than trust the corpus's label: the label was produced on another
machine, with another torch, sometimes by another version of the harness. Re-running it
here, on the same files and device as the contract's gates, makes the disagreement matrix
compare like with like.

What it does, as KernelBench's ``eval_kernel_against_ref`` does: ``set_seed(42)`` before
``get_init_inputs()``, again before ``Model(*init)`` and again before ``ModelNew(*init)``;
a ``torch.Generator`` seeded 42 draws one seed per trial with ``torch.randint(0, 2**32 - 1)``;
per trial: seed, ``get_inputs()``, reference first, then ``ModelNew`` on the same tensors,
shape check, ``torch.allclose(atol=tol, rtol=tol)``; 5 trials. Both tolerances are applied:
``1e-2`` (older runs; most published corpora were judged with it) and today's per-dtype one
(fp32 ``1e-4``, fp16/bf16 ``1e-2``, chosen by the reference output's dtype).

Trust: the candidate is hostile, so this check runs in a child process (started with
``python -m kernelgate.audit.oldcheck``), never in the judge. The child reports progress and
the result as JSON lines on a dedicated pipe; the judge keeps only validated numbers,
booleans and one-line strings. The old check is as gameable here as in its own harness (a
candidate that patches ``torch.allclose`` fools it): that is the point of running it side by
side with the contract.

A problem folder (``formats/problem.py``) has its own rule instead, run the same way in the
same confined child (``_problem_child``): every declared shape, three seeds each, the
solution with the reference's weights, ``allclose`` at the yaml tolerance of the output's
dtype.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kernelgate.audit.processes import (
    PARENT_ENV,
    child_env,
    exit_when_reader_gone,
    kill_tree,
    tail,
)
from kernelgate.sandbox import confine

NUM_CORRECT_TRIALS = 5
LEGACY_TOLERANCE = 1e-2
CURRENT_TOLERANCES = {"float32": 1e-4, "float16": 1e-2, "bfloat16": 1e-2}
DEFAULT_CURRENT_TOLERANCE = 1e-4
LOAD_TIMEOUT = 600.0  # importing torch, building the reference, compiling the candidate

ACCEPTED, REJECTED, ERROR, NOT_RUN = "accepted", "rejected", "error", "not-run"


def current_tolerance(dtype_name: str) -> float:
    """KernelBench's tolerance today for an output of this dtype."""
    return CURRENT_TOLERANCES.get(dtype_name, DEFAULT_CURRENT_TOLERANCE)


def not_run(reason: str) -> dict[str, Any]:
    """The old check's row when it could not be run at all (unreadable record, no device)."""
    return {"status": NOT_RUN, "status_current": NOT_RUN, "compiled": None, "failure": reason}


# -- the judge's side ------------------------------------------------------------------------


def _rejected(failure: str, *, compiled: bool, trials: dict[str, Any]) -> dict[str, Any]:
    return {
        "status": REJECTED,
        "status_current": REJECTED,
        "compiled": compiled,
        "failure": failure,
        **trials,
    }


def _validated(result: Any) -> dict[str, Any]:
    """Keep only the fields, and types, a result may carry; everything else is dropped."""
    if not isinstance(result, dict):
        return {"status": ERROR, "status_current": ERROR, "failure": "malformed result"}
    clean: dict[str, Any] = {}
    for key in ("status", "status_current", "failure", "output_dtype"):
        if isinstance(result.get(key), str):
            clean[key] = result[key][:500]
    for key in ("compiled",):
        if isinstance(result.get(key), bool):
            clean[key] = result[key]
    for key in ("trials", "passed_legacy", "passed_current", "device_peak_bytes"):
        if isinstance(result.get(key), int) and not isinstance(result.get(key), bool):
            clean[key] = result[key]
    for key in ("tolerance_legacy", "tolerance_current", "max_abs_diff"):
        value = result.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            clean[key] = float(value) if math.isfinite(value) else str(value)
        elif value in ("nan", "inf", "-inf"):
            clean[key] = value
    if clean.get("device_peak_bytes", 0) < 0:
        del clean["device_peak_bytes"]
    if clean.get("status") not in (ACCEPTED, REJECTED, ERROR):
        clean["status"] = ERROR
    if clean.get("status_current") not in (ACCEPTED, REJECTED, ERROR):
        clean["status_current"] = clean["status"]
    return clean


def run_old_check(
    reference: Path,
    candidate: Path,
    *,
    device: str,
    timeout: float,
    scratch: Path | None = None,
    compile_timeout: float = 0.0,
) -> dict[str, Any]:
    """Run KernelBench's check of ``candidate`` against ``reference`` in a child process,
    confined as ``verify``'s worker is (``sandbox/confine.py``, KERNELGATE_ISOLATION).

    ``timeout`` bounds each candidate call (one trial); loading gets ``LOAD_TIMEOUT``, and the
    first trial ``compile_timeout`` more (where a candidate builds its kernels). A hang
    or crash is a rejection, as in KernelBench (its batch runner records a timed-out or
    crashed evaluation as not compiled, not correct). The result's ``isolation`` is the
    launcher's report as one line (``confine.summary_line``). ``scratch``: the child's
    writable folder, left in place for the same candidate's verification to reuse (its
    CUDA extension and Triton builds); by default one of its own, removed afterwards.

    A confined child that fails before its trials (the harness dies, the reference or the
    candidate does not load) is checked as the worker's load is: if a trusted probe worker
    cannot load under the same confinement on this machine (``loosened_confinement``), the
    check runs once more with the confinement the probe needed, and ``isolation`` names
    each mechanism dropped and why. A candidate cannot earn that by failing: the probe,
    not the candidate, decides.
    """
    from kernelgate.sandbox.session import isolation_mode, loosened_confinement, with_loosened

    mode, skip = isolation_mode(), []
    limits = (timeout, compile_timeout)
    result, isolation = _run_child(reference, candidate, device, limits, mode, skip, scratch)
    if mode != "off" and _failed_before_trials(result):
        loosened = loosened_confinement(device, [], skip)
        if loosened is not None:
            new_skip, reasons = loosened
            mode = "off" if new_skip is None else mode
            result, isolation = _run_child(
                reference, candidate, device, limits, mode, new_skip or [], scratch
            )
            isolation = with_loosened(isolation, reasons, off=mode == "off")
    return result | {"isolation": confine.summary_line(isolation)}


def _failed_before_trials(result: dict[str, Any]) -> bool:
    """Whether the child never reached a trial: the harness died, or nothing loaded."""
    return result.get("status") == ERROR or (
        result.get("status") == REJECTED and result.get("compiled") is False
    )


def _run_child(
    reference: Path,
    candidate: Path,
    device: str,
    limits: tuple[float, float],
    mode: str,
    skip: list[str],
    shared_scratch: Path | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One run of the child (see ``run_old_check``): its result and the isolation report.
    ``limits``: the trial timeout and the first trial's compile allowance.

    The child gets a scratch folder as its only writable place (its own, removed when its
    whole tree is gone, unless ``shared_scratch`` is given) and dies when the judge does:
    it watches the result pipe (``exit_when_reader_gone``), which works inside a PID
    namespace, where the judge is not its parent and ``getppid()`` names nobody outside;
    and its launcher is SIGKILLed with the judge (``die_with_caller``), which ends the
    namespace even if the candidate starves the watcher thread.
    """
    from kernelgate.sandbox.session import confined_command, read_launcher_report

    read_fd, write_fd = os.pipe()
    scratch = shared_scratch or Path(tempfile.mkdtemp(prefix="kernelgate-oldcheck-"))
    env = child_env(device)
    env.pop(PARENT_ENV, None)  # its parent is the launcher's: the pipe says when to go
    env.update(confine.scratch_env(str(scratch)))
    # -P: the scratch folder (its cwd, writable by the candidate) is never on sys.path
    child = [sys.executable, "-P", "-m", "kernelgate.audit.oldcheck", str(write_fd)]
    child += [str(reference.resolve()), str(candidate.resolve()), device]  # cwd: scratch
    launch = confined_command(child, scratch=scratch, mode=mode, skip=skip, die_with_caller=True)
    with tempfile.NamedTemporaryFile("w+b", suffix=".log", delete=False) as log:
        log_path = Path(log.name)
        process = subprocess.Popen(
            launch.argv,
            pass_fds=(write_fd, *launch.pass_fds),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            cwd=scratch,
            start_new_session=True,
        )
    report_fd = launch.started()
    os.close(write_fd)
    isolation = launch.isolation
    try:
        if isolation is None:
            isolation = read_launcher_report(report_fd, lambda: tail(log_path, 300))
        return _await_result(process, read_fd, log_path, *limits), isolation
    finally:
        os.close(read_fd)
        if report_fd >= 0:
            os.close(report_fd)
        _stop(process, confined=mode != "off")
        log_path.unlink(missing_ok=True)
        if shared_scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)


def _stop(process: subprocess.Popen[bytes], *, confined: bool) -> None:
    """End the child's whole tree. A confined child's launcher is asked first (SIGTERM: it
    kills its child, so a PID namespace takes every process in it along, and it removes
    its pids cgroup); then everything left in the tree is killed, sessions notwithstanding."""
    if confined and process.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=2)
    kill_tree(process.pid)
    process.wait()


def _await_result(
    process: subprocess.Popen[bytes],
    read_fd: int,
    log_path: Path,
    timeout: float,
    compile_timeout: float = 0.0,
) -> dict[str, Any]:
    """Read the child's progress and result from the pipe, within the phase's deadline
    (the first trial's is ``compile_timeout`` longer: a first forward builds)."""
    phase, buffer, result = "startup", b"", None
    allowance = {"startup": LOAD_TIMEOUT}  # seconds of the phase now running
    trials_seen = 0
    deadline = time.monotonic() + LOAD_TIMEOUT
    while result is None:
        left = deadline - time.monotonic()
        if left <= 0:
            in_trial = phase.startswith("trial")
            return _rejected(
                f"timed out in {phase} (no answer within {allowance[phase]:g} s)",
                compiled=in_trial,
                trials={"trials": NUM_CORRECT_TRIALS},
            )
        ready, _, _ = select.select([read_fd], [], [], min(left, 1.0))
        if not ready:
            continue
        chunk = os.read(read_fd, 65536)
        if not chunk:
            break
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            try:
                message = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError):
                continue
            if not isinstance(message, dict):
                continue
            if "result" in message:
                result = _validated(message["result"])
                break
            if isinstance(message.get("phase"), str):
                phase = message["phase"][:40]
                limit = timeout if phase.startswith("trial") else LOAD_TIMEOUT
                if phase.startswith("trial"):
                    trials_seen += 1
                    limit += compile_timeout if trials_seen == 1 else 0.0
                allowance[phase] = limit
                deadline = time.monotonic() + limit
    if result is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)  # the child exits by itself once it answered
        return result
    code = process.wait(timeout=10)
    detail = f"signal {-code}" if code < 0 else f"exit code {code}"
    log_tail = tail(log_path, 300).strip().splitlines()
    last = f": {log_tail[-1]}" if log_tail else ""
    if phase in ("startup", "reference"):
        return {
            "status": ERROR,
            "status_current": ERROR,
            "failure": f"old-check harness died in {phase} ({detail}){last}",
        }
    return _rejected(
        f"candidate process died in {phase} ({detail}){last}",
        compiled=phase.startswith("trial"),
        trials={"trials": NUM_CORRECT_TRIALS},
    )


# -- the child's side ------------------------------------------------------------------------


def _flat(value: Any) -> list[Any]:
    if isinstance(value, list | tuple):
        return [item for v in value for item in _flat(v)]
    return [value]


def _compare(
    expected: Any, actual: Any, tolerances: tuple[float, float]
) -> tuple[bool, bool, float, str | None]:
    """(legacy ok, current ok, max |difference|, failure) for one trial's outputs."""
    import torch

    wanted, got = _flat(expected), _flat(actual)
    if len(wanted) != len(got):
        return False, False, math.nan, f"output count mismatch: {len(wanted)} vs {len(got)}"
    oks = [True, True]
    worst = 0.0
    for want, have in zip(wanted, got):
        if not isinstance(want, torch.Tensor) or not isinstance(have, torch.Tensor):
            return False, False, math.nan, "output is not a tensor"
        if want.shape != have.shape:
            return (
                False,
                False,
                math.nan,
                f"output shape mismatch: expected {tuple(want.shape)}, got {tuple(have.shape)}",
            )
        try:
            for i, tol in enumerate(tolerances):
                oks[i] &= bool(torch.allclose(want, have, atol=tol, rtol=tol))
            diff = (want.double() - have.double()).abs()
            worst = max(worst, float(diff.max()) if diff.numel() else 0.0)
        except RuntimeError as exc:
            return False, False, math.nan, f"comparison failed: {exc}"
    return oks[0], oks[1], worst, None


def _device_peak() -> dict[str, int]:
    """The most device memory this child's PyTorch allocator reserved (the reference's and
    the candidate's runs together), for fitting admission's estimate of the check
    (``admission.estimate_old_check_bytes``; ``benchmarks/admission_fit.py``). The candidate
    runs in this process and can misstate it: no verdict reads it. Empty without a device."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    return {"device_peak_bytes": int(torch.cuda.max_memory_reserved())}


def _child(result_fd: int, reference: str, candidate: str, device: str) -> None:
    exit_when_reader_gone(result_fd)  # the judge gone: nobody reads the result
    os.dup2(2, 1)  # candidate prints go to the log, never to the result pipe
    pipe = os.fdopen(result_fd, "w", buffering=1)

    def emit(**message: Any) -> None:
        if isinstance(message.get("result"), dict):
            message["result"] = message["result"] | _device_peak()
        pipe.write(json.dumps(message) + "\n")
        pipe.flush()

    emit(phase="reference")
    if os.path.isdir(reference):  # a problem folder: its own rule (``_problem_child``)
        _problem_child(emit, reference, candidate, device)
        return
    import importlib.util

    import torch

    from kernelgate.errors import KernelgateError
    from kernelgate.formats.kernelbench import KERNELBENCH_SEED, load_reference, set_seed

    try:
        program = load_reference(reference)
        target = torch.device(device)
        init_inputs = [
            v.to(target) if isinstance(v, torch.Tensor) else v for v in program.init_inputs()
        ]
        model = program.build_model(init_inputs).to(target)
    except (KernelgateError, Exception) as exc:
        emit(result={"status": ERROR, "failure": f"reference: {type(exc).__name__}: {exc}"})
        return

    emit(phase="load")
    from kernelgate.sandbox.builds import remember_failed_builds

    remember_failed_builds()  # the verification's workers share this scratch folder
    try:
        spec = importlib.util.spec_from_file_location("kernelgate_oldcheck_candidate", candidate)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        set_seed(KERNELBENCH_SEED)
        candidate_model = module.ModelNew(*init_inputs).to(target)
    except BaseException as exc:  # a candidate may raise anything, SystemExit included
        emit(
            result={
                "status": REJECTED,
                "compiled": False,
                "failure": f"does not load: {type(exc).__name__}: {exc}",
            }
        )
        return

    generator = torch.Generator()
    generator.manual_seed(KERNELBENCH_SEED)
    seeds = torch.randint(0, 2**32 - 1, (NUM_CORRECT_TRIALS,), generator=generator).tolist()
    passed = [0, 0]
    worst, failure, dtype_name = 0.0, None, ""
    tolerances = (LEGACY_TOLERANCE, DEFAULT_CURRENT_TOLERANCE)
    for index, trial_seed in enumerate(seeds):
        emit(phase=f"trial {index}")
        inputs = [
            v.to(target) if isinstance(v, torch.Tensor) else v
            for v in program.inputs(int(trial_seed))
        ]
        with torch.no_grad():
            expected = model(*inputs)
            first = _flat(expected)[0]
            if isinstance(first, torch.Tensor):
                dtype_name = str(first.dtype).removeprefix("torch.")
                tolerances = (LEGACY_TOLERANCE, current_tolerance(dtype_name))
            try:
                actual = candidate_model(*inputs)
                if target.type == "cuda":
                    torch.cuda.synchronize()
            except BaseException as exc:
                failure = f"runtime error in trial {index}: {type(exc).__name__}: {exc}"
                break
        legacy_ok, current_ok, diff, problem = _compare(expected, actual, tolerances)
        if problem is None:  # a NaN difference sticks: it is the worst there is
            worst = diff if math.isnan(diff) or math.isnan(worst) else max(worst, diff)
        if problem is not None:
            failure = f"trial {index}: {problem}"
            break
        passed[0] += legacy_ok
        passed[1] += current_ok
    complete = failure is None
    emit(
        result={
            "status": ACCEPTED if complete and passed[0] == NUM_CORRECT_TRIALS else REJECTED,
            "status_current": ACCEPTED
            if complete and passed[1] == NUM_CORRECT_TRIALS
            else REJECTED,
            "compiled": True,
            "trials": NUM_CORRECT_TRIALS,
            "passed_legacy": passed[0],
            "passed_current": passed[1],
            "tolerance_legacy": LEGACY_TOLERANCE,
            "tolerance_current": tolerances[1],
            "output_dtype": dtype_name,
            "max_abs_diff": worst if math.isfinite(worst) else str(worst),
            "failure": failure,
        }
    )


def _problem_child(emit: Any, folder: str, candidate: str, device: str) -> None:
    """A problem folder's own rule: at every declared shape and each of three seeds,
    the solution's ``Model`` (with the reference's weights, ``load_state_dict(strict=True)``)
    against the reference, ``allclose`` with the yaml tolerance of the output's dtype.
    Reported in the fields KernelBench's check fills (``trials``: shapes x seeds; legacy and
    current are the same rule here)."""
    import importlib.util

    import torch

    from kernelgate.formats.problem import OLD_CHECK_SEEDS, load_problem, reference_weights

    try:
        problem = load_problem(folder)
        program = problem.program
        assert program is not None
    except Exception as exc:
        emit(result={"status": ERROR, "failure": f"problem: {type(exc).__name__}: {exc}"})
        return
    emit(phase="load")
    target = torch.device(device)
    try:
        spec = importlib.util.spec_from_file_location("kernelgate_oldcheck_candidate", candidate)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        solution_cls = module.Model
    except BaseException as exc:
        emit(
            result={
                "status": REJECTED,
                "compiled": False,
                "failure": f"does not load: {type(exc).__name__}: {exc}",
            }
        )
        return
    trials = len(problem.shapes) * len(OLD_CHECK_SEEDS)
    passed, worst, failure, dtype_name, tolerance = 0, 0.0, None, "", math.nan
    for shape in problem.shapes:
        with program.rebound(**shape):
            init_inputs = program.init_inputs()
            model = program.build_model(init_inputs).to(target)
            names, tensors = reference_weights(program, init_inputs)
            try:
                solution = solution_cls(*init_inputs)
                solution.load_state_dict(dict(zip(names, tensors, strict=True)), strict=True)
                solution = solution.to(target)
            except BaseException as exc:
                failure = f"at {shape}: Model does not build: {type(exc).__name__}: {exc}"
                break
            for seed in OLD_CHECK_SEEDS:
                emit(phase=f"trial {shape} seed {seed}")
                inputs = [
                    v.to(target) if isinstance(v, torch.Tensor) else v for v in program.inputs(seed)
                ]
                with torch.no_grad():
                    expected = model(*inputs)
                    first = _flat(expected)[0]
                    if isinstance(first, torch.Tensor):
                        dtype_name = str(first.dtype).removeprefix("torch.")
                        tolerance = problem.tolerance_for(dtype_name)
                    try:
                        actual = solution(*inputs)
                        if target.type == "cuda":
                            torch.cuda.synchronize()
                    except BaseException as exc:
                        failure = f"runtime error at {shape} seed {seed}: {type(exc).__name__}"
                        failure += f": {exc}"
                        break
                ok, _, diff, problem_text = _compare(expected, actual, (tolerance, tolerance))
                if problem_text is not None:
                    failure = f"at {shape} seed {seed}: {problem_text}"
                    break
                worst = diff if math.isnan(diff) or math.isnan(worst) else max(worst, diff)
                passed += ok
        if failure is not None:
            break
    status = ACCEPTED if failure is None and passed == trials else REJECTED
    emit(
        result={
            "status": status,
            "status_current": status,
            "compiled": True,
            "trials": trials,
            "passed_legacy": passed,
            "passed_current": passed,
            "tolerance_legacy": tolerance,
            "tolerance_current": tolerance,
            "output_dtype": dtype_name,
            "max_abs_diff": worst if math.isfinite(worst) else str(worst),
            "failure": failure,
        }
    )


if __name__ == "__main__":
    _child(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4])
    sys.stdout.flush()
    os._exit(0)  # candidate threads or atexit hooks must not keep the child alive
