"""RES-02 (resource budget) and the compute-sanitizer part of RES-01."""

from __future__ import annotations

import dataclasses

import pytest
from typer.testing import CliRunner

import kernelgate
from kernelgate.cli import app
from kernelgate.contract.derive import derive_contract
from kernelgate.formats.kernelbench import load_reference
from kernelgate.gates.base import Status
from kernelgate.sandbox.resources import parse_resource_usage
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
    assert kernel["spill_bytes"] == 0
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


@pytest.mark.gpu
def test_spilling_kernel_fails_res02_on_the_device() -> None:
    gate = _res02(HALF, DATA / "res_spill.py", device="cuda", timeout=600)
    assert gate.status is Status.FAIL, gate.reason
    resources = {f["resource"] for f in gate.counterexample.findings}
    assert "spill_bytes" in resources
    (kernel,) = gate.evidence["kernels"]
    assert kernel["spill_bytes"] > 0 and kernel["num_warps"] == 1


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
    assert [r["tool"] for r in runs] == ["memcheck", "racecheck", "initcheck"]
    assert all(r["errors"] == 0 for r in runs), runs
    assert verdict.verdict.value == "verified"
