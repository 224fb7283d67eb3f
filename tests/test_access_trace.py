"""The Triton interpreter's access trace (``sandbox/access_trace.py``) and RES-01 on it.

The worker-side trace patches Triton's interpreter, so its tests run in a subprocess of
their own (the patch would otherwise stay on the test process's Triton): a script loads
small kernels from a file, runs each inside ``AccessTrace.call`` with the poison allocator
active, and prints each call's report as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from kernelgate.pipeline import verify
from kernelgate.redteam.catalog import entries
from kernelgate.sandbox.access_trace import TRACE_ENV, AccessLog

KERNELS = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def copy(x_ptr, out_ptr, n, shift, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs + shift, mask=offs < n, other=-1.0)
        tl.store(out_ptr + offs, x, mask=offs < n)


    @triton.jit
    def everyone_writes_zero(out_ptr):
        tl.store(out_ptr, 1.0)


    @triton.jit
    def count(out_ptr):
        tl.atomic_add(out_ptr, 1.0)


    @triton.jit
    def read_unwritten(scratch_ptr, out_ptr, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(scratch_ptr + offs, offs.to(tl.float32), mask=offs < BLOCK // 2)
        tl.store(out_ptr + offs, tl.load(scratch_ptr + offs))


    def run(case, x):
        out = torch.empty_like(x)
        n = x.numel()
        if case == "clean":
            copy[(triton.cdiv(n, 64),)](x, out, n, 0, BLOCK=64)
        elif case == "guard":  # one element past the end: the input's guard band
            copy[(triton.cdiv(n, 64),)](x, out, n, 1, BLOCK=64)
        elif case == "wild":  # 2**40 bytes away: unmapped host memory if it ran
            copy[(triton.cdiv(n, 64),)](x, out, n, 1 << 38, BLOCK=64)
        elif case == "race":
            everyone_writes_zero[(4,)](out)
        elif case == "atomic":
            total = torch.zeros(1)
            count[(4,)](total)
            out = total
        elif case == "uninit":
            scratch = torch.empty(64)
            read_unwritten[(1,)](scratch, out, BLOCK=64)
        return out
    """
)

SCRIPT = textwrap.dedent(
    """
    import importlib.util, json, sys
    import torch
    from kernelgate.inputs.placement import PlacedTensor
    from kernelgate.sandbox.access_trace import AccessTrace
    from kernelgate.sandbox.poison import PoisonAllocator

    trace = AccessTrace()
    if sys.argv[2] == "broken":  # a Triton whose builder lacks a method the trace wraps
        import triton.runtime.interpreter as interpreter
        del interpreter.InterpreterBuilder.create_masked_store
    trace.install()
    spec = importlib.util.spec_from_file_location("kernels", sys.argv[1])
    kernels = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kernels)
    reports = {}
    for case in sys.argv[3:]:
        x = PlacedTensor.place(torch.arange(100, dtype=torch.float32)).view()
        allocator = PoisonAllocator()
        with allocator.active(0xFF, 16384), trace.call(True, [x], allocator):
            out = x if sys.argv[2] == "broken" else kernels.run(case, x)
        reports[case] = trace.report(True) | {"out": out[:4].tolist() + out[-2:].tolist()}
    print(json.dumps(reports))
    """
)


def _trace(tmp_path: Path, *cases: str, mode: str = "normal") -> dict[str, Any]:
    kernels = tmp_path / "kernels.py"
    kernels.write_text(KERNELS)
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = os.environ | {"TRITON_INTERPRET": "1", "PYTHONPATH": str(Path("src").resolve())}
    done = subprocess.run(
        [sys.executable, str(script), str(kernels), mode, *cases],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_trace_finds_guard_band_reads_races_and_unwritten_scratch(tmp_path: Path) -> None:
    reports = _trace(tmp_path, "clean", "guard", "wild", "race", "atomic", "uninit")
    clean = reports["clean"]
    assert clean["traced"] and clean["findings"] == [] and clean["load"] == clean["store"] == 100

    (guard,) = reports["guard"]["findings"]
    assert (guard["kind"], guard["op"], guard["lanes"]) == ("out-of-bounds", "load", 1)
    assert guard["first"]["program"] == [1, 0, 0] and guard["first"]["stopped"] == 0
    assert "element 100 of 100 (1 past its end)" in guard["first"]["address"]
    assert "tl.load(x_ptr + offs + shift" in guard["line"]
    assert reports["guard"]["out"][-1] != reports["guard"]["out"][-1]  # NaN: the guard's poison

    wild = reports["wild"]
    (finding,) = wild["findings"]
    assert finding["first"]["stopped"] == 64 and finding["lanes"] == wild["stopped"] == 100
    assert wild["out"] == [-1.0] * 6  # masked off before the interpreter read host memory

    (race,) = reports["race"]["findings"]
    assert race["kind"] == "write-write race" and race["first"]["programs"][0] == [0, 0, 0]
    assert race["first"]["programs"][1] != [0, 0, 0]

    assert reports["atomic"]["findings"] == [] and reports["atomic"]["atomic"] == 4
    assert reports["atomic"]["out"][0] == 4.0

    (uninit,) = reports["uninit"]["findings"]
    assert uninit["kind"] == "uninitialised read" and uninit["lanes"] == 32
    assert "element 32 of 64" in uninit["first"]["address"]


def test_trace_says_skipped_when_the_interpreter_internals_are_not_found(
    tmp_path: Path,
) -> None:
    report = _trace(tmp_path, "clean", mode="broken")["clean"]
    assert report["traced"] is False
    assert "create_masked_store" in report["why"] and "internals not found" in report["why"]


def test_access_log_merges_findings_over_calls_and_summarises() -> None:
    finding = {
        "kind": "write-write race",
        "op": "store",
        "kernel": "k",
        "line": "k.py:3: tl.store(...)",
        "lanes": 2,
        "first": {"programs": [[0, 0, 0], [1, 0, 0]], "address": "out element 0 of 4"},
    }
    report = {"traced": True, "launches": 1, "load": 4, "store": 8, "findings": [finding]}
    log = AccessLog()
    log.add("CMP-01", "normal", 7, report)
    log.add("CMP-02", "strided", 9, report)
    log.add("CMP-03", "large", 11, {"traced": False, "why": "switched off by the judge"})
    assert len(log.findings) == 1
    merged = log.findings[0]
    assert (merged["calls"], merged["lanes"], merged["gate"], merged["seed"]) == (2, 4, "CMP-01", 7)
    assert "2 calls, 2 launches, 8 load / 16 store" in log.summary()
    assert "1 calls untraced (switched off by the judge)" in log.summary()
    assert "program (0, 0, 0) and program (1, 0, 0)" in AccessLog.describe(merged)
    assert AccessLog().summary() == "access trace not run: no candidate call"


@pytest.mark.parametrize(
    ("name", "kind"),
    [("oob_tail_read", "out-of-bounds"), ("uninitialised_scratch_read", "uninitialised read")],
)
def test_res01_fails_on_the_trace_and_can_be_switched_off(
    name: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (entry,) = entries([name])
    verdict = verify(entry.reference_path, entry.candidate_path, only=["RES-01"], timeout=120)
    gate = verdict.gate("RES-01")
    assert gate.status.value == "fail" and kind in gate.reason
    assert gate.counterexample is not None
    assert gate.counterexample.findings[0]["line"].startswith(f"{name}.py:")
    monkeypatch.setenv(TRACE_ENV, "0")
    verdict = verify(entry.reference_path, entry.candidate_path, only=["RES-01"], timeout=120)
    gate = verdict.gate("RES-01")
    assert gate.status.value == "pass" and "access trace not run" in gate.reason


LAZY_SHIFTED_RELU = textwrap.dedent(
    """
    import torch
    import triton
    import triton.language as tl


    @triton.jit
    def shifted_relu(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs + 1, mask=offs < n, other=0.0)  # one past the end
        tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=offs < n)


    class Lazy(torch.Tensor):
        @staticmethod
        def __new__(cls, x):
            made = torch.Tensor._make_subclass(cls, torch.empty(0, dtype=x.dtype))
            made.source = x.clone()  # a copy: the caller's later writes change nothing
            return made

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            def dense(a):
                out = torch.empty_like(a.source)
                n = out.numel()
                shifted_relu[(triton.cdiv(n, 64),)](a.source, out, n, BLOCK=64)
                return out

            args = [dense(a) if isinstance(a, cls) else a for a in args]
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {}))


    class ModelNew(torch.nn.Module):
        def forward(self, x):
            return Lazy(x)
    """
)


def test_a_kernel_run_when_the_output_is_read_is_traced(tmp_path: Path) -> None:
    """A lazy output defers its kernel to the moment the output is read; the worker reads
    it inside the call's instrumentation, so the trace sees the deferred kernel read past
    the end of its input (it holds a copy: ORD-02's reuse check cannot see it)."""
    (relu,) = entries(["relu"])
    candidate = tmp_path / "lazy_shifted_relu.py"
    candidate.write_text(LAZY_SHIFTED_RELU)
    verdict = verify(relu.reference_path, candidate, only=["RES-01"], timeout=120)
    gate = verdict.gate("RES-01")
    assert gate.status.value == "fail", gate.reason
    assert gate.counterexample is not None
    assert gate.counterexample.findings[0]["line"].startswith("lazy_shifted_relu.py:")
