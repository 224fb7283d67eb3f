"""Layer 3 on the device, judged on the CPU (issue 24, parts 1 and 2): compute-sanitizer
reports attributed and trimmed to the candidate's kernels, the per-record budget, who is
sanitized in an audit, ``--no-sanitize``, RES-02 on the extension kernels that launched,
and the audit summary's coverage of both. Sanitizer reports are written here in the
format compute-sanitizer 2024/2025 prints; no GPU is used."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

import kernelgate.audit.command as audit_command
from kernelgate.audit.command import resume_command
from kernelgate.audit.device_checks import (
    res02_coverage,
    res02_row,
    res02_skip_group,
    sanitizer_row,
    sanitizer_summary,
)
from kernelgate.audit.judge import AuditOptions
from kernelgate.audit.report import _sections, summarize
from kernelgate.cli import app
from kernelgate.gates.base import Counterexample, GateKind, GateResult, Status
from kernelgate.gates.res01_execution import sanitize_after_gates
from kernelgate.gates.res02_resources import launched_extension_kernels
from kernelgate.sandbox import sanitizer
from kernelgate.sandbox.resources import mangled_base_name
from kernelgate.sandbox.sanitizer import (
    KernelNames,
    SanitizePolicy,
    SanitizerRun,
    attribute_report,
    parse_summary,
    run_status,
)
from kernelgate.sandbox.sanitizer_outcomes import DEFAULT_BUDGET_S

MEMCHECK_REPORT = """\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at oob_write_kernel(const float *, float *, int)+0x1b0 in /tmp/kernelgate-scratch-1/torch_extensions/oob_ext/cuda.cu:11
=========     by thread (127,0,0) in block (7,0,0)
=========     Address 0x7f2a3c000400 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f2a3c000000 of size 1024 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========     Host Frame: [0x2f285f]
=========                in /lib/x86_64-linux-gnu/libcuda.so.1
=========     Host Frame:oob_write(at::Tensor) [0x1c3f]
=========                in /tmp/kernelgate-scratch-1/torch_extensions/oob_ext/oob_ext.so
=========
========= Invalid __global__ read of size 16 bytes
=========     at void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char *, 1>>(int, T2, T3)+0x2c0 in /pytorch/aten/src/ATen/native/cuda/CUDALoops.cuh:74
=========     by thread (0,0,0) in block (0,0,0)
=========     Address 0x7f2a3c100000 is out of bounds
=========     Saved host backtrace up to driver entry point at kernel launch time
=========     Host Frame: [0x2f285f]
=========                in /lib/x86_64-linux-gnu/libcuda.so.1
=========
========= Program hit cudaErrorInvalidValue (error 1) due to "invalid argument" on CUDA API call to cudaMemcpyAsync.
=========     Saved host backtrace up to driver entry point at error
=========     Host Frame: [0x4c4f3a]
=========                in /lib/x86_64-linux-gnu/libcuda.so.1
=========
========= ERROR SUMMARY: 3 errors
"""  # noqa: E501 (compute-sanitizer's lines, as it prints them)

RACECHECK_REPORT = """\
========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at block_sum_kernel(const float *, float *, int)+0x1a0 in /tmp/s/ext/cuda.cu:20
=========     and Read access at block_sum_kernel(const float *, float *, int)+0x2c0 in /tmp/s/ext/cuda.cu:24 [512 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""  # noqa: E501

CANDIDATE = KernelNames(
    authored=frozenset({"oob_write_kernel", "block_sum_kernel"}),
    library=frozenset({"vectorized_elementwise_kernel"}),
)


def test_memcheck_report_is_attributed_and_trimmed_to_the_candidates_kernel() -> None:
    attributed = attribute_report(MEMCHECK_REPORT, CANDIDATE)
    assert attributed.candidate == 1
    assert attributed.other == 2  # the library's fill kernel and the host API error
    assert attributed.other_kernels == ["vectorized_elementwise_kernel"]
    report = attributed.report
    assert "at oob_write_kernel(const float *, float *, int)+0x1b0" in report
    assert "Address 0x7f2a3c000400 is out of bounds" in report
    assert "vectorized_elementwise_kernel" not in report and "cudaMemcpyAsync" not in report
    assert "Host Frame" not in report and "libcuda" not in report
    assert "ERROR SUMMARY: 3 errors" in report
    assert "(2 error block(s) outside the candidate's kernels not shown)" in report


def test_racecheck_hazard_names_the_kernel_in_its_access_lines() -> None:
    attributed = attribute_report(RACECHECK_REPORT, CANDIDATE)
    assert (attributed.candidate, attributed.other) == (1, 0)
    assert "and Read access at block_sum_kernel" in attributed.report
    assert parse_summary(RACECHECK_REPORT) == 1


def test_library_only_errors_do_not_count_as_the_candidates() -> None:
    """A candidate whose own kernels are clean is not failed by a library's report; a
    kernel the profile did not list is taken as the candidate's (erring towards failure)."""
    only_library = KernelNames(authored=frozenset({"my_softmax"}), library=CANDIDATE.library)
    attributed = attribute_report(MEMCHECK_REPORT, only_library)
    assert attributed.candidate == 1 and attributed.other == 2  # oob_write_kernel: unlisted
    first, second = (MEMCHECK_REPORT.index(f"Invalid __global__ {a}") for a in ("write", "read"))
    library_log = MEMCHECK_REPORT[:first] + MEMCHECK_REPORT[second:]
    attributed = attribute_report(library_log, only_library)
    assert attributed.candidate == 0 and attributed.other == 2
    assert "ERROR SUMMARY" in attributed.report and "Invalid" not in attributed.report


def test_without_known_kernels_every_kernel_error_is_the_candidates() -> None:
    """``verify --sanitize`` on a candidate with no profile: as before, any kernel's error."""
    attributed = attribute_report(MEMCHECK_REPORT, None)
    assert attributed.candidate == 2 and attributed.other == 1  # the API error is the host's


def test_synccheck_summary_is_parsed() -> None:
    log = (
        "========= Barrier error detected. Divergent thread(s) in warp\n"
        "=========     at bad_sync_kernel(float *)+0x70 in /tmp/s/k.cu:12\n"
        "=========     by thread (0,0,0) in block (0,0,0)\n"
        "=========\n========= ERROR SUMMARY: 1 error\n"
    )
    assert parse_summary(log) == 1
    assert attribute_report(log, KernelNames(frozenset({"bad_sync_kernel"}))).candidate == 1


def _run(**fields: Any) -> SanitizerRun:
    base: dict[str, Any] = {"tool": "memcheck", "errors": 0, "calls": 1, "seconds": 3.0}
    return SanitizerRun(**(base | fields))


@pytest.mark.parametrize(
    ("fields", "flags", "status"),
    [
        ({}, {}, "clean"),
        ({"errors": 1, "candidate_errors": 1}, {}, "findings"),
        # memcheck stopped the faulting kernel, then the run ran out of time: still found
        ({"errors": 1, "candidate_errors": 1}, {"over_budget": True}, "findings"),
        ({"errors": 2, "other_errors": 2}, {}, "other-findings"),
        ({"errors": None, "budget_s": 15.0}, {"over_budget": True}, "out-of-budget"),
        ({"errors": None, "incidents": ["load failed"]}, {"load_failed": True}, "not-run"),
        ({"errors": None}, {}, "inconclusive"),
        ({"errors": 0, "incidents": ["crash: signal 11"]}, {}, "inconclusive"),
    ],
)
def test_a_run_that_did_not_reach_its_summary_is_never_clean(
    fields: dict[str, Any], flags: dict[str, bool], status: str
) -> None:
    options = {"over_budget": False, "load_failed": False} | flags
    assert run_status(_run(**fields), **options)[0] == status


def test_the_budget_is_shared_by_the_tools_and_a_spent_one_skips_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [0.0]
    shares: list[tuple[str, float | None]] = []

    def fake_tool(tool: str, *args: Any, budget_s: float | None, **kwargs: Any) -> SanitizerRun:
        shares.append((tool, budget_s))
        clock[0] += {"memcheck": 10.0, "racecheck": 35.0}.get(tool, 14.5)
        return _run(tool=tool, status="clean", budget_s=budget_s)

    monkeypatch.setattr(sanitizer, "find_compute_sanitizer", lambda: "/bin/true")
    monkeypatch.setattr(sanitizer, "sanitizer_confinement", lambda *a: None)
    monkeypatch.setattr(sanitizer, "started_now", lambda: clock[0])
    monkeypatch.setattr(sanitizer, "run_tool", fake_tool)
    runs, why = sanitizer.sanitize_candidate(
        Path("c.py"), [], "cuda", [[]], poison=0, guard_bytes=0, timeout=10, budget_s=60.0
    )
    assert why == ""
    assert [t for t, _ in shares] == ["memcheck", "racecheck", "synccheck"]
    assert shares[0][1] == pytest.approx(15.0)  # 60 / 4
    assert shares[1][1] == pytest.approx(50.0 / 3)  # memcheck left 50 for three tools
    assert shares[2][1] == pytest.approx(15.0 / 2)  # racecheck overran its share
    assert [r.status for r in runs] == ["clean", "clean", "clean", "out-of-budget"]
    assert "spent by the tools before it" in runs[3].why


def _ctx(device: str = "cuda") -> Any:
    return SimpleNamespace(
        session=SimpleNamespace(
            device=device, candidate=Path("cand.py"), init_inputs=[], timeout=10.0, calls=40
        ),
        halted=None,
        contract=SimpleNamespace(dims=[], inputs=[]),  # no tensor input: a small reference
        drawn_case=lambda label, seed: SimpleNamespace(values=[3], label=label),
        case_seed=lambda gate, index: 7,
        replay=lambda gate: f"kernelgate verify ref.py cand.py --device cuda --only {gate}",
        access=SimpleNamespace(summary=lambda: "access trace: 1 call"),
    )


def _res01(status: Status = Status.PASS) -> GateResult:
    return GateResult(
        "RES-01",
        GateKind.EXACT,
        "execution safety",
        status,
        "no incident in 40 candidate calls; compute-sanitizer not run: not requested",
        evidence={"sanitizer": "compute-sanitizer not run: not requested", "sanitizer_runs": []},
    )


AUTHORED = {
    "authored_share": 0.9,
    "how": "cuda-kineto",
    "kernels": [
        {"name": "oob_write_kernel(float const*, float*, int)", "authored": True},
        {"name": "void at::native::vectorized_elementwise_kernel<4>(int)", "authored": False},
    ],
}
TORCH_ONLY = {
    "authored_share": 0.0,
    "how": "cuda-kineto",
    "kernels": [
        {"name": "void at::native::softmax_warp_forward<float>(float*)", "authored": False}
    ],
}


@pytest.fixture
def fake_tools(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """sanitize_candidate replaced: records what it was asked, memcheck finds the OOB write."""
    calls: list[dict[str, Any]] = []

    def fake(candidate: Path, init: Any, device: str, cases: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        found = attribute_report(MEMCHECK_REPORT, kwargs["kernels"])
        memcheck = _run(
            errors=3,
            report=found.report,
            candidate_errors=found.candidate,
            other_errors=found.other,
            status="findings",
        )
        rest = [_run(tool=t, status="clean") for t in ("racecheck", "initcheck", "synccheck")]
        return [memcheck, *rest], ""

    monkeypatch.setattr("kernelgate.gates.res01_execution.sanitize_candidate", fake)
    return calls


def test_an_authored_kernel_makes_the_record_eligible_and_memcheck_fails_res01(
    fake_tools: list[dict[str, Any]],
) -> None:
    result = sanitize_after_gates(_res01(), _ctx(), SanitizePolicy("authored", 60.0), AUTHORED)
    (asked,) = fake_tools
    assert asked["budget_s"] == 60.0 and asked["tools"][-1] == "initcheck"
    assert asked["kernels"].authored == {"oob_write_kernel"}
    assert "vectorized_elementwise_kernel" in asked["kernels"].library
    assert result.status is Status.FAIL
    assert result.reason == "compute-sanitizer found errors in the candidate's kernels: memcheck 1"
    (finding,) = result.counterexample.findings
    assert "oob_write_kernel" in finding["report"] and "FillFunctor" not in finding["report"]
    assert result.counterexample.replay.endswith("--only RES-01 --sanitize")
    assert result.evidence["sanitizer_eligible"] is True
    assert result.evidence["sanitizer_runs"][0]["status"] == "findings"


@pytest.mark.parametrize(
    ("authorship", "why"),
    [
        (TORCH_ONLY, "no kernel of the candidate's own launched"),
        ({"authored_share": None, "why": "the profiled call failed: boom"}, "is unknown: the"),
    ],
)
def test_a_record_without_authored_kernels_is_not_sanitized_and_says_why(
    fake_tools: list[dict[str, Any]], authorship: dict[str, Any], why: str
) -> None:
    result = sanitize_after_gates(_res01(), _ctx(), SanitizePolicy("authored", 60.0), authorship)
    assert fake_tools == []
    assert result.status is Status.PASS
    assert result.evidence["sanitizer_eligible"] is False
    assert result.evidence["sanitizer"].startswith("compute-sanitizer not run: ")
    assert why in result.evidence["sanitizer"]


def test_verify_sanitize_runs_on_every_candidate(fake_tools: list[dict[str, Any]]) -> None:
    """``--sanitize`` (policy "always") keeps its old reach: a PyTorch-only candidate too,
    every kernel-naming error counted as the candidate's (no authored names to go by)."""
    result = sanitize_after_gates(_res01(), _ctx(), SanitizePolicy(), TORCH_ONLY)
    (asked,) = fake_tools
    assert asked["kernels"] is None and asked["budget_s"] is None
    assert result.status is Status.FAIL


def test_an_earlier_failure_keeps_its_counterexample_and_gains_the_summary(
    fake_tools: list[dict[str, Any]],
) -> None:
    failed = _res01(Status.FAIL)
    result = sanitize_after_gates(failed, _ctx(), SanitizePolicy("authored", 60.0), AUTHORED)
    assert result.status is Status.FAIL and result.counterexample is None
    assert result.reason.endswith(
        "memcheck findings (1 in the candidate's kernels) (2 outside the candidate's kernels), "
        "racecheck clean, initcheck clean, synccheck clean"
    )


def test_cpu_mode_is_never_sanitized(fake_tools: list[dict[str, Any]]) -> None:
    result = sanitize_after_gates(_res01(), _ctx("cpu"), SanitizePolicy(), AUTHORED)
    assert fake_tools == []
    assert result.evidence["sanitizer"].startswith("compute-sanitizer not run: CPU mode")


def test_audit_options_sanitize_device_audits_by_default() -> None:
    assert AuditOptions("out", device="cpu").sanitize_policy() is None
    policy = AuditOptions("out", device="cuda").sanitize_policy()
    assert policy == SanitizePolicy("authored", DEFAULT_BUDGET_S)
    assert AuditOptions("out", device="cuda", sanitize_seconds=30).sanitize_policy().seconds == 30
    assert AuditOptions("out", device="cuda", sanitize=False).sanitize_policy() is None
    # a sanitized record's judge gets the budget on top of its ceiling
    on, off = AuditOptions("o", device="cuda"), AuditOptions("o", device="cuda", sanitize=False)
    assert on.record_limit > off.record_limit + 2 * 60


def test_no_sanitize_reaches_the_audit_and_its_resume_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    asked: dict[str, Any] = {}

    def fake_run_audit(*args: Any, **kwargs: Any) -> Any:
        asked.update(kwargs)
        raise audit_command.KernelgateError("stopped by the test")

    monkeypatch.setattr(audit_command, "run_audit", fake_run_audit)
    corpus = tmp_path / "pairs"
    corpus.mkdir()
    for flags, sanitize, seconds in (
        (["--no-sanitize"], False, DEFAULT_BUDGET_S),
        (["--sanitize-seconds", "25"], True, 25.0),
        ([], True, DEFAULT_BUDGET_S),
    ):
        asked.clear()
        CliRunner().invoke(app, ["audit", str(corpus), "--out", str(tmp_path / "o"), *flags])
        assert (asked["sanitize"], asked["sanitize_seconds"]) == (sanitize, seconds), flags
    common: dict[str, Any] = {
        "fmt": "auto",
        "problems": None,
        "device": "cuda",
        "workers": None,
        "executor": "local",
        "ray_address": None,
        "limit": None,
        "timeout": 60.0,
        "host_memory": None,
    }
    off = resume_command(corpus, tmp_path, **common, sanitize=False)
    assert off.endswith("--no-sanitize --resume")
    short = resume_command(corpus, tmp_path, **common, sanitize_seconds=25.0)
    assert "--sanitize-seconds 25 " in short and "--no-sanitize" not in short


def _res02_result(status: Status, kernels: list[dict[str, Any]]) -> GateResult:
    budget = {"registers": 255, "spill_bytes": 0, "shared_bytes": 232448}
    findings = [
        {"kernel": k["name"], "resource": "registers", "value": k["registers"], "budget": 255}
        for k in kernels
        if k["registers"] > 255
    ]
    counterexample = (
        Counterexample(case="c", seed=0, inputs=[], findings=findings, replay="r")
        if findings
        else None
    )
    return GateResult(
        "RES-02",
        GateKind.EXACT,
        "resource budget",
        status,
        "as the gate left it",
        counterexample=counterexample,
        evidence={"budget": budget, "kernels": kernels, "unmeasured": []},
    )


def _ext(name: str, symbol: str, registers: int) -> dict[str, Any]:
    return {
        "backend": "cuda-extension",
        "name": name,
        "symbol": symbol,
        "registers": registers,
        "spill_bytes": 0,
        "shared_bytes": 0,
    }


def test_mangled_kernel_symbols_are_read_to_their_base_names() -> None:
    assert mangled_base_name("_Z16oob_write_kernelPKfPfi") == "oob_write_kernel"
    assert mangled_base_name("_ZN2ns10add_kernelIfEEvPT_") == "add_kernel"
    assert mangled_base_name("_Z14softmax_kernelIfLi256EEvPKT_PS0_ii") == "softmax_kernel"
    assert mangled_base_name("_ZN12_GLOBAL__N_110add_kernelEPf") == "add_kernel"
    assert mangled_base_name("_ZL10add_kernelPf") == "add_kernel"
    assert mangled_base_name("plain_c_kernel") == "plain_c_kernel"
    assert mangled_base_name("_Z3") is None  # truncated: kept as the symbol


def test_res02_judges_only_the_extension_kernels_that_launched() -> None:
    """An extension with a launched kernel within budget and a never-launched one over it:
    the failure was the unlaunched kernel's, so RES-02 passes once the profile is known."""
    kernels = [
        _ext("fast_kernel", "_Z11fast_kernelPf", 40),
        _ext("unused_kernel", "_Z13unused_kernelPf", 300),
    ]
    failed = _res02_result(Status.FAIL, kernels)
    profile = {"how": "cuda-kineto", "kernels": [{"name": "fast_kernel(float*)"}]}
    result = launched_extension_kernels(failed, profile)
    assert result.status is Status.PASS and result.counterexample is None
    assert [k["name"] for k in result.evidence["kernels"]] == ["fast_kernel"]
    assert result.evidence["not_launched"] == ["unused_kernel"]
    assert result.reason.startswith("1 kernel(s) within the budget (at most 40 registers")
    # the launched kernel over budget still fails, with only its finding
    profile = {"how": "cuda-kineto", "kernels": [{"name": "void unused_kernel(float*)"}]}
    result = launched_extension_kernels(failed, profile)
    assert result.status is Status.FAIL
    assert [f["kernel"] for f in result.counterexample.findings] == ["unused_kernel"]


def test_res02_keeps_every_extension_kernel_when_the_launches_are_unknown() -> None:
    failed = _res02_result(Status.FAIL, [_ext("k", "_Z1kPf", 300), _ext("j", "_Z1jPf", 10)])
    for profile in (
        {"how": None, "why": "the profiled call failed"},
        {"how": "cuda-kineto", "kernels": [{"name": "something_else(int)"}]},
    ):
        result = launched_extension_kernels(failed, profile)
        assert result.status is Status.FAIL
        assert result.evidence["extension_kernels"].startswith("every kernel of the extension")


def _row(record: str, authored: int | None, res02: str, reason: str, sanitized: Any) -> dict:
    gates = [
        {
            "id": "RES-02",
            "kind": "tolerance-free",
            "status": res02,
            "seconds": 0.1,
            "reason": reason,
        },
        {"id": "RES-01", "kind": "tolerance-free", "status": "pass", "seconds": 0.1},
    ]
    return {
        "id": record,
        "source_ids": [record],
        "source_verdict": "accepted",
        "old_check": "accepted",
        "old_check_current": "accepted",
        "old_check_detail": {},
        "verdict": "verified",
        "stage": "gates",
        "gates": gates,
        "failed_gates": [],
        "seconds": 2.0,
        "authored_kernels": authored,
        "sanitizer": sanitized,
        "res02": res02_row(gates),
    }


def _sanitized(memcheck: str, seconds: float) -> dict[str, Any]:
    evidence = {
        "sanitizer_policy": {"when": "authored", "seconds": 60.0},
        "sanitizer_seconds": seconds * 4,
        "sanitizer_runs": [
            {"tool": "memcheck", "status": memcheck, "errors": 1, "seconds": seconds},
            *[
                {"tool": t, "status": "clean", "errors": 0, "seconds": seconds}
                for t in ("racecheck", "initcheck")
            ],
            {"tool": "synccheck", "status": "out-of-budget", "errors": None, "seconds": seconds,
             "why": "ran past its budget of 15 s"},
        ],
    }  # fmt: skip
    return sanitizer_row(evidence)


ROWS = [
    _row("oob", 1, "pass", "1 kernel(s) within the budget", _sanitized("findings", 10.0)),
    _row("honest", 2, "fail", "1 budget violation(s)", _sanitized("clean", 20.0)),
    _row("no_cuobjdump", 1, "skipped", "resource usage of 1 kernel(s) could not be "
         "obtained: /x.so: cuobjdump not found (CUDA toolkit)", _sanitized("clean", 30.0)),
    _row("torch_only", 0, "skipped", "no candidate kernel was seen launching (PyTorch-only)",
         {"not_run": "compute-sanitizer not run: no kernel of the candidate's own launched"}),
    _row("old_row", 1, "pass", "fine", None),
]  # fmt: skip


def test_summary_gives_each_tools_coverage_and_cost() -> None:
    summary = sanitizer_summary(ROWS, {"sanitize": {"when": "authored", "seconds": 60}})
    assert summary["records_with_authored_kernels"] == 4
    memcheck = summary["tools"]["memcheck"]
    assert memcheck == {
        "eligible": 4,
        "ran": 3,
        "clean": 2,
        "findings": 1,
        "other_findings": 0,
        "did_not_run": {},
        "total_s": 60.0,
        "median_s": 20.0,
    }
    assert summary["tools"]["synccheck"]["ran"] == 0
    assert summary["tools"]["synccheck"]["did_not_run"] == {"out-of-budget": 3}
    assert summary["not_sanitized"] == {
        "not recorded (row from before the sanitizer ran in audits)": 1
    }
    # a CPU audit's RES-01 evidence has no policy: nothing requested, whatever it traced
    assert sanitizer_row({"sanitizer": "access trace: 12 calls"}) == {
        "not_run": "not requested (a CPU audit, or --no-sanitize)"
    }


def test_summary_gives_res02_coverage_and_groups_the_reasons() -> None:
    coverage = res02_coverage(ROWS)
    assert coverage == {
        "records_with_authored_kernels": 4,
        "ran": 3,
        "rate": 0.75,
        "did_not_run": {"cuobjdump not found": 1},
    }
    assert res02_skip_group("not selected (--only)") == "not selected (--only)"
    assert res02_skip_group("kernel foo: 12 things odd: x") == "kernel foo"


def test_report_has_the_sanitizer_and_res02_tables() -> None:
    summary = summarize(ROWS, {"sanitize": {"when": "authored", "seconds": 60}})
    assert summary["sanitizers"]["tools"]["memcheck"]["findings"] == 1
    assert summary["res02_coverage"]["ran"] == 3
    tables = {title: cells for title, _header, cells in _sections(summary)}
    sanitizers = tables["compute-sanitizer (RES-01) on records with authored kernels"]
    assert sanitizers[0] == ["memcheck", "4", "3", "1", "0", "-", "60", "20.0"]
    assert sanitizers[2][0] == "synccheck" and sanitizers[2][5] == "out-of-budget 3"
    res02 = tables["RES-02 coverage (records with authored kernels)"]
    assert res02[:2] == [
        ["records with authored kernels", "4"],
        ["RES-02 ran (pass or fail)", "3 (75.0%)"],
    ]
    assert res02[2] == ["did not run: cuobjdump not found", "1"]


def test_extensions_built_anywhere_in_the_scratch_folder_count_but_caches_do_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A candidate that passes ``build_directory="cuda_extensions"`` (relative to the
    worker's folder) builds outside the torch extensions root: its library is still the
    candidate's; Triton's launcher modules in its cache folder are not."""
    import sys
    import types

    from kernelgate.sandbox import confine
    from kernelgate.sandbox.resources import LaunchRecorder

    scratch = tmp_path / "scratch"
    for key, value in confine.scratch_env(str(scratch)).items():
        monkeypatch.setenv(key, value)
    built = {
        "kg_ext_root": scratch / "torch_extensions" / "a" / "a.so",
        "kg_ext_relative": scratch / "cuda_extensions" / "b.so",
        "kg_triton_launcher": scratch / "triton" / "x" / "cuda_utils.so",
        "kg_elsewhere": tmp_path / "elsewhere" / "c.so",
    }
    for path in built.values():
        path.parent.mkdir(parents=True)
        path.write_bytes(b"")
    monkeypatch.chdir(scratch)
    recorder = LaunchRecorder()
    for name, path in built.items():
        module = types.ModuleType(name)
        module.__file__ = str(path)
        monkeypatch.setitem(sys.modules, name, module)
    found = [r["path"] for r in recorder.extensions()]
    assert found == sorted(str(built[n].resolve()) for n in ("kg_ext_relative", "kg_ext_root"))


def test_a_host_only_library_has_no_kernels_and_is_not_unmeasured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelgate.sandbox import resources

    fake = tmp_path / "cuobjdump"
    fake.write_text(
        "#!/bin/sh\necho \"cuobjdump info    : File '$2' does not contain device code\" >&2\n"
    )
    fake.chmod(0o755)
    monkeypatch.setattr(resources, "find_cuobjdump", lambda: str(fake))
    assert resources.dump_resource_usage(str(tmp_path / "host.so")) == ([], "")
    fake.write_text("#!/bin/sh\necho 'Fatbin ptx code:'\n")
    kernels, why = resources.dump_resource_usage(str(tmp_path / "ptx.so"))
    assert kernels == [] and why.startswith("cuobjdump found no SASS")


def test_a_fault_in_a_cub_function_inside_the_candidates_kernel_is_the_candidates() -> None:
    """cub's device functions run inside the kernel that calls them: the device call stack
    names the candidate's kernel, and a cub frame alone is no library kernel."""
    log = (
        "========= Invalid __shared__ read of size 4 bytes\n"
        "=========     at void cub::CUB_200200_900_NS::BlockReduce<float, 256>::Sum(float)+0x90"
        " in /usr/local/cuda/include/cub/block/block_reduce.cuh:356\n"
        "=========     by thread (3,0,0) in block (0,0,0)\n"
        "=========     Device Frame:row_sum_kernel(const float *, float *, int)+0x3a0"
        " in /tmp/s/ext/cuda.cu:31\n"
        "=========\n========= ERROR SUMMARY: 1 error\n"
    )
    names = KernelNames(authored=frozenset({"row_sum_kernel"}))
    attributed = attribute_report(log, names)
    assert attributed.candidate == 1 and "Device Frame:row_sum_kernel" in attributed.report
    unlisted = KernelNames(authored=frozenset({"other_kernel"}))
    assert (
        attribute_report(log.replace("Device Frame:row_sum_kernel", "x"), unlisted).candidate == 1
    )


def test_a_tool_out_of_budget_is_not_waited_for_its_summary(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A run past its share counts as out of budget whatever summary it writes later, so
    its exit is cut short: initcheck used to wait its whole exit grace (as long again as
    its share) on every CUDA-L1 record it ran."""
    clock = [0.0]
    exits: list[float] = []

    class FakeSession:
        exit_grace, compile_timeout, isolation, timeout = 120.0, 600.0, None, 0.0

        def start(self) -> None:
            clock[0] += 5.0

        def call(self, inputs: Any, **kwargs: Any) -> None:
            clock[0] += 100.0  # the instrumented call runs past the share, and times out
            raise sanitizer.ExecutionIncident("timeout", "no answer (hang or runaway)")

        def __exit__(self, *args: Any) -> None:
            exits.append(self.exit_grace)

    monkeypatch.setattr(sanitizer, "started_now", lambda: clock[0])
    monkeypatch.setattr(sanitizer, "sanitizer_confinement", lambda *a: None)
    monkeypatch.setattr(sanitizer, "sanitized_session", lambda *a, **k: FakeSession())
    monkeypatch.setattr(sanitizer, "sanitized_isolation", lambda *a: None)
    run = sanitizer.run_tool(
        "initcheck", "/bin/true", Path("c.py"), [], "cuda", [[]],
        poison=0, guard_bytes=0, timeout=10.0, budget_s=75.0,
    )  # fmt: skip
    assert run.status == "out-of-budget"
    assert exits == [sanitizer.OVER_BUDGET_EXIT_GRACE_S]
    # within its share the sanitizer keeps the exit grace it needs to write its summary
    exits.clear()
    FakeSession.call = lambda self, inputs, **kwargs: None  # type: ignore[method-assign]
    run = sanitizer.run_tool(
        "initcheck", "/bin/true", Path("c.py"), [], "cuda", [[]],
        poison=0, guard_bytes=0, timeout=10.0, budget_s=75.0,
    )  # fmt: skip
    assert exits == [75.0] and run.status == "inconclusive"  # no log: no summary


def test_a_large_reference_is_sanitized_at_the_smallest_shape_cmp03_passed(
    monkeypatch: pytest.MonkeyPatch, fake_tools: list[dict[str, Any]]
) -> None:
    """At KernelBench's sizes initcheck ran past its share on every CUDA-L1 record: a
    reference over SANITIZER_SMALL_ELEMENTS input elements is sanitized at the smallest
    held-out shape the candidate got right that keeps the model (its weights carry over)."""
    from kernelgate.gates import res01_execution

    full = res01_execution.SANITIZER_SMALL_ELEMENTS * 4
    monkeypatch.setattr(res01_execution, "input_elements", lambda contract, sizes: full)
    rebuilt = {"hidden": 7}  # a dim whose change rebuilds the model

    def sized_case(label: str, seed: int, sizes: dict[str, int]) -> Any:
        init = [1] if set(sizes) & set(rebuilt) else None
        return SimpleNamespace(values=[sizes], label=label, init_inputs=init)

    ctx = _ctx()
    ctx.sized_case = sized_case
    shapes = [
        {"label": "batch=1 (min)", "dim": "batch", "value": 1, "status": "fail",
         "input_elements": 10},  # the candidate was wrong there: not chosen
        {"label": "hidden=7", "dim": "hidden", "value": 7, "status": "pass",
         "input_elements": 20, "rebuilt_model": True},  # a new model: not chosen
        {"label": "batch=3 (prime)", "dim": "batch", "value": 3, "status": "pass",
         "input_elements": 30, "rebuilt_model": False},
        {"label": "batch=2", "dim": "batch", "value": 2, "status": "pass",
         "input_elements": 40, "rebuilt_model": False},
        {"label": "batch=9999 (large)", "dim": "batch", "value": 9999, "status": "pass",
         "input_elements": 2 * full, "rebuilt_model": False},
    ]  # fmt: skip
    case = res01_execution.sanitizer_case(ctx, shapes)
    assert case.label == "batch=3 (prime), normal values" and case.values == [{"batch": 3}]
    result = sanitize_after_gates(_res01(), ctx, SanitizePolicy("authored", 60.0), AUTHORED, shapes)
    assert result.evidence["sanitizer_case"] == "batch=3 (prime), normal values"
    assert result.counterexample.case == "compute-sanitizer: batch=3 (prime), normal values"
    # nothing smaller passed (or CMP-03 did not run): the reference shape
    for left in ([], None, [r for r in shapes if r["status"] == "fail"]):
        assert res01_execution.sanitizer_case(ctx, left).label == res01_execution.SANITIZER_CASE
    # a sized case that would rebuild the model after all: the reference shape
    rebuilt["batch"] = 0
    assert res01_execution.sanitizer_case(ctx, shapes).label == res01_execution.SANITIZER_CASE
    # a small reference keeps its own shape whatever CMP-03 passed
    monkeypatch.setattr(res01_execution, "input_elements", lambda contract, sizes: 100)
    rebuilt.clear()
    assert res01_execution.sanitizer_case(ctx, shapes).label == res01_execution.SANITIZER_CASE
