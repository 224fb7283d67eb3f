"""RES-02 (resource budget) and the compute-sanitizer part of RES-01."""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import ClassVar

import pytest
import torch
import triton.language as tl
from typer.testing import CliRunner

import kernelgate
from kernelgate.cli import app
from kernelgate.contract.derive import derive_contract
from kernelgate.formats.kernelbench import load_reference
from kernelgate.gates.base import Status
from kernelgate.sandbox import confine, resources, sanitizer
from kernelgate.sandbox.resources import (
    LaunchRecorder,
    launch_specialization,
    parse_ptxas_log,
    parse_resource_usage,
    spill_figures,
)
from kernelgate.sandbox.sanitizer import parse_summary

from .conftest import DATA, SOFTMAX

HALF = DATA / "exc02_reference.py"

CUOBJDUMP_SAMPLE = """
Fatbin elf code:
================
arch = sm_90
code version = [1,7]

Resource usage:
 Common:
  GLOBAL:0
 Function _Z11row_softmaxPKfPfi:
  REG:32 STACK:16 SHARED:4096 LOCAL:24 CONSTANT[0]:540 TEXTURE:0 SURFACE:0 SAMPLER:0
 Function _Z4copyPKfPfi:
  REG:8 STACK:0 SHARED:0 LOCAL:0 CONSTANT[0]:540 TEXTURE:0 SURFACE:0 SAMPLER:0
"""


# ptxas -v of a kernel with a non-inlined callee (the layout ptxas 12.x and 13.x print)
PTXAS_SAMPLE = """
ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_wy_fwd_kernel' for 'sm_90a'
ptxas info    : Function properties for _wy_fwd_kernel
    48 bytes stack frame, 52 bytes spill stores, 64 bytes spill loads
ptxas info    : Function properties for __internal_helper
    16 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
ptxas info    : Used 128 registers, used 1 barriers, 48 bytes cumulative stack size
"""


def _res02(reference, candidate, **kwargs):
    return kernelgate.verify(reference, candidate, only=["RES-02"], **kwargs).gate("RES-02")


def test_parse_cuobjdump_resource_usage() -> None:
    kernels = parse_resource_usage(CUOBJDUMP_SAMPLE)
    assert [k["name"] for k in kernels] == ["_Z11row_softmaxPKfPfi", "_Z4copyPKfPfi"]
    first = kernels[0]
    assert (first["registers"], first["local_bytes"], first["static_shared_bytes"]) == (
        32,
        24,
        4096,
    )
    assert first["stack_bytes"] == 16 and first["arch"] == "sm_90"


def test_parse_ptxas_log() -> None:
    usage = parse_ptxas_log(PTXAS_SAMPLE)
    assert usage is not None
    assert (usage["spill_store_bytes"], usage["spill_load_bytes"]) == (60, 72)  # all functions
    assert usage["stack_frame_bytes"] == 48  # the entry's own frame
    assert usage["registers"] == 128
    assert [f["name"] for f in usage["functions"]] == ["_wy_fwd_kernel", "__internal_helper"]
    assert parse_ptxas_log("ptxas fatal   : Unresolved extern function") is None


def test_a_stack_frame_is_recorded_beside_spills_not_as_spills() -> None:
    frame_only = {"spill_store_bytes": 0, "spill_load_bytes": 0, "stack_frame_bytes": 48}
    figures = spill_figures(frame_only, "", 48, "the driver's local memory size")
    assert figures["spill_bytes"] == 0
    assert (figures["stack_frame_bytes"], figures["local_memory_bytes"]) == (48, 48)
    assert figures["spill_source"].startswith("ptxas -v spill stores")
    # Without ptxas, the whole local memory counts, erring towards failure, and says so.
    fallback = spill_figures(None, "no PTX", 48, "the driver's local memory size")
    assert fallback["spill_bytes"] == 48 and fallback["stack_frame_bytes"] is None
    assert (
        "no PTX" in fallback["spill_source"]
        and "erring towards failure" in (fallback["spill_source"])
    )


class _FakeMetadata:
    name = "_fake_kernel"
    hash = "abc123"
    shared = 1024
    num_warps = 8

    class target:  # mimics GPUTarget's attribute
        arch = 90


class _FakeCompiledKernel:
    """What the device hook sees: Triton's n_spills is the driver's local size / 4."""

    metadata = _FakeMetadata()
    n_regs = 128
    n_spills = 12  # 48 bytes of local memory
    asm: ClassVar[dict[str, str]] = {"ptx": "// a kernel's PTX"}


@pytest.mark.parametrize("ptxas_answers", [True, False], ids=["ptxas", "no-ptxas"])
def test_device_records_judge_spills_by_ptxas_not_local_size(monkeypatch, ptxas_answers) -> None:
    calls = []

    def fake_ptxas_usage(ptx, options, arch):
        calls.append((ptx, arch))
        if not ptxas_answers:
            return None, "ptxas not found"
        return {"spill_store_bytes": 0, "spill_load_bytes": 0, "stack_frame_bytes": 48}, ""

    monkeypatch.setattr(resources, "ptxas_usage", fake_ptxas_usage)
    recorder = LaunchRecorder()
    for _ in range(3):  # the same kernel launched again: ptxas is asked once
        recorder._record_compiled(None, _FakeCompiledKernel(), (), {})
    (record,) = [r for r in recorder.drain() if r["backend"] == "triton"]
    assert calls == [("// a kernel's PTX", 90)]
    assert record["registers"] == 128 and record["local_memory_bytes"] == 48
    if ptxas_answers:
        assert record["spill_bytes"] == 0 and record["stack_frame_bytes"] == 48
    else:
        assert record["spill_bytes"] == 48 and "ptxas not found" in record["spill_source"]


def _specialized(x_ptr, n, m, BLOCK: tl.constexpr):  # a kernel's signature, never launched
    pass


def test_launch_specialization_honours_do_not_specialize() -> None:
    x = torch.zeros(64)[1:]  # 4-byte aligned only
    y = torch.zeros(64)
    plain = launch_specialization(_specialized, (y, 1, 32), {"BLOCK": 16})
    assert plain["signature"] == {
        "x_ptr": "*fp32",
        "n": "constexpr",
        "m": "i32",
        "BLOCK": "constexpr",
    }
    assert plain["constexprs"] == {"n": 1, "BLOCK": 16}
    assert plain["attrs"] == {"x_ptr": "D", "m": "D"}
    kept = launch_specialization(
        _specialized, (y, 1, 32), {"BLOCK": 16}, do_not_specialize=["n", 2]
    )
    assert kept["signature"]["n"] == "i32" and kept["constexprs"] == {"BLOCK": 16}
    assert kept["attrs"] == {"x_ptr": "D"}
    unaligned = launch_specialization(
        _specialized, (y, 17, 32), {"BLOCK": 16}, do_not_specialize_on_alignment=["x_ptr"]
    )
    assert unaligned["attrs"] == {"m": "D"}
    assert launch_specialization(_specialized, (x, 17, 32), {"BLOCK": 16})["attrs"] == {"m": "D"}


def test_interpreted_launches_record_the_jit_do_not_specialize() -> None:
    """The interpreter hook passes @triton.jit(do_not_specialize=...) on, so the offline
    compile builds the specialization the device would."""
    from triton.runtime.interpreter import InterpretedFunction

    recorder = LaunchRecorder()
    fn = InterpretedFunction(_specialized, do_not_specialize=["n"])
    recorder._record_interpreted(fn, None, (torch.zeros(64), 1, 32), {"BLOCK": 16, "grid": (1,)})
    (record,) = recorder.drain()
    assert record["signature"]["n"] == "i32" and "n" not in record["constexprs"]


def test_parse_sanitizer_summary() -> None:
    assert parse_summary("========= ERROR SUMMARY: 0 errors\n") == 0
    assert parse_summary("=== Invalid __global__ read\n========= ERROR SUMMARY: 3 errors") == 3
    assert parse_summary("worker crashed before the summary") is None
    racecheck = "========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)\n"
    assert parse_summary(racecheck) == 1
    assert parse_summary("RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)") == 0


def test_triton_kernel_is_compiled_offline_and_within_budget() -> None:
    gate = _res02(HALF, DATA / "exc02_honest.py")
    assert gate.status is Status.PASS, gate.reason
    (kernel,) = gate.evidence["kernels"]
    assert kernel["name"] == "_half_kernel"
    assert "offline compile for sm_90" in kernel["source"]
    assert 0 < kernel["registers"] <= 255
    assert kernel["spill_bytes"] == 0 and kernel["stack_frame_bytes"] == 0
    assert kernel["spill_source"].startswith("ptxas -v spill stores")
    assert kernel["specialization"]["constexprs"] == {"BLOCK": 256}


def test_spilling_kernel_fails_offline() -> None:
    """maxnreg=32 with 64 live floats per thread: the sm_90 cubin spills (no device needed)."""
    gate = _res02(HALF, DATA / "res_spill.py")
    assert gate.status is Status.FAIL, gate.reason
    finding = gate.counterexample.findings[0]
    assert finding["kernel"] == "_spilling_half_kernel"
    assert finding["resource"] == "spill_bytes" and finding["value"] > 0
    (kernel,) = gate.evidence["kernels"]
    assert kernel["registers"] <= 32
    assert kernel["spill_source"].startswith("ptxas -v spill stores")
    assert kernel["stack_frame_bytes"] > 0  # the spill slots live in the stack frame
    assert kernel["specialization"]["options"] == {"num_warps": 1, "maxnreg": 32}


def test_kernel_over_a_tight_register_budget_fails() -> None:
    """The contract's budget is the law: the same kernel fails a budget below its figures."""
    contract = derive_contract(load_reference(HALF))
    budget = dataclasses.replace(contract.execution.budget, registers_per_thread=4)
    contract.execution = dataclasses.replace(contract.execution, budget=budget)
    gate = _res02(HALF, DATA / "exc02_honest.py", contract=contract)
    assert gate.status is Status.FAIL
    finding = gate.counterexample.findings[0]
    assert finding["kernel"] == "_half_kernel" and finding["resource"] == "registers"
    assert finding["value"] > finding["budget"] == 4
    assert "--only RES-02" in gate.counterexample.replay


def test_pytorch_only_candidate_is_skipped_not_passed() -> None:
    gate = _res02(SOFTMAX / "reference.py", DATA / "torch_softmax.py")
    assert gate.status is Status.SKIPPED
    assert "no candidate kernel" in gate.reason


@pytest.mark.parametrize(
    ("needs", "skipped"),
    [("", ("no-network",)), ("pid-namespace", ("no-network", "pid-namespace"))],
)
def test_sanitized_worker_keeps_the_strictest_confinement_the_sanitizer_allows(
    tmp_path, monkeypatch, needs: str, skipped: tuple[str, ...]
) -> None:
    """compute-sanitizer's frontend sits outside the sandbox: the judge drops only what a
    trusted probe shows the sanitizer needs (here a stand-in that writes no summary unless
    ``needs`` are skipped) and reports each dropped mechanism with the reason."""
    if os.environ.get(confine.ENV_SWITCH) == "off":
        pytest.skip("confinement turned off for this run")
    fake = tmp_path / "compute-sanitizer"
    fake.write_text(f'#!/bin/sh\nexec {sys.executable} {DATA / "fake_sanitizer.py"} "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("FAKE_SANITIZER_NEEDS", needs)
    assert sanitizer.sanitizer_confinement(str(fake), "cpu").skip == skipped
    run = sanitizer.run_tool(
        "memcheck", str(fake), DATA / "exc02_honest.py", [], "cpu", [],
        poison=0, guard_bytes=0, timeout=30,
    )  # fmt: skip
    assert run.errors == 0 and run.clean, run
    missing = run.isolation["missing"]
    for name in skipped:
        assert "compute-sanitizer's frontend runs outside the sandbox" in missing[name]
    if "landlock-fs" in run.isolation["in_force"] and run.isolation.get("landlock_abi", 0) >= 4:
        assert missing["landlock-net"].startswith("TCP connect allowed to ports 49152, ")


def test_sanitize_in_cpu_mode_says_it_did_not_run() -> None:
    result = CliRunner().invoke(
        app,
        ["verify", str(HALF), str(DATA / "exc02_honest.py"), "--only", "RES-01", "--sanitize"],
    )
    assert result.exit_code == 0, result.output
    verdict = kernelgate.verify(HALF, DATA / "exc02_honest.py", only=["RES-01"], sanitize=True)
    res01 = verdict.gate("RES-01")
    assert res01.status is Status.PASS
    assert res01.evidence["sanitizer"].startswith("compute-sanitizer not run: CPU mode")
    assert res01.evidence["sanitizer_runs"] == []


@pytest.mark.gpu
def test_device_resources_of_the_honest_softmax() -> None:
    gate = _res02(SOFTMAX / "reference.py", SOFTMAX / "honest.py", device="cuda")
    assert gate.status is Status.PASS, gate.reason
    (kernel,) = gate.evidence["kernels"]
    assert kernel["source"] == "compiled kernel launched on the device"
    assert 0 < kernel["registers"] <= 255 and kernel["spill_bytes"] == 0
    assert kernel["spill_source"].startswith("ptxas -v spill stores"), kernel["spill_source"]


@pytest.mark.gpu
def test_spilling_kernel_fails_res02_on_the_device() -> None:
    gate = _res02(HALF, DATA / "res_spill.py", device="cuda", timeout=600)
    assert gate.status is Status.FAIL, gate.reason
    resources = {f["resource"] for f in gate.counterexample.findings}
    assert "spill_bytes" in resources
    (kernel,) = gate.evidence["kernels"]
    assert kernel["spill_bytes"] > 0 and kernel["num_warps"] == 1
    # judged by ptxas's spill stores, as offline; the driver's local size is evidence beside
    assert kernel["spill_source"].startswith("ptxas -v spill stores"), kernel["spill_source"]
    assert kernel["local_memory_bytes"] > 0 and kernel["stack_frame_bytes"] > 0


@pytest.mark.gpu
def test_cuda_extension_resources_are_read_with_cuobjdump() -> None:
    gate = _res02(SOFTMAX / "reference.py", DATA / "cuda_softmax.py", device="cuda")
    assert gate.status is Status.PASS, (gate.reason, gate.evidence)
    assert all(k["backend"] == "cuda-extension" for k in gate.evidence["kernels"])
    assert all(k["registers"] > 0 for k in gate.evidence["kernels"])


@pytest.mark.gpu
def test_sanitizer_finds_a_far_out_of_bounds_read() -> None:
    verdict = kernelgate.verify(
        HALF, DATA / "res_oob_read.py", device="cuda", only=["RES-01"], sanitize=True
    )
    res01 = verdict.gate("RES-01")
    assert res01.status is Status.FAIL, res01.evidence
    runs = {r["tool"]: r for r in res01.evidence["sanitizer_runs"]}
    assert runs["memcheck"]["errors"] > 0
    assert "--sanitize" in res01.counterexample.replay


@pytest.mark.gpu
def test_honest_softmax_is_clean_under_the_sanitizer() -> None:
    verdict = kernelgate.verify(
        SOFTMAX / "reference.py", SOFTMAX / "honest.py", device="cuda", sanitize=True
    )
    res01 = verdict.gate("RES-01")
    assert res01.status is Status.PASS, res01.evidence
    runs = res01.evidence["sanitizer_runs"]
    assert [r["tool"] for r in runs] == ["memcheck", "racecheck", "synccheck", "initcheck"]
    assert all(r["errors"] == 0 for r in runs), runs
    assert verdict.verdict.value == "verified"
