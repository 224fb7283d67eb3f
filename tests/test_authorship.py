"""Authorship and AUTH-01: which kernels a candidate call ran, which it wrote, and the rule.

The worker-side measurement is exercised on the CPU (Triton interpreter, aten ops) through a
real worker; the judge side (parsing the untrusted record, the rule, the audit summary) as
plain functions. The device path (Kineto) is in ``test_gpu_authorship``, marked ``gpu``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from kernelgate.audit.judge import AuditOptions
from kernelgate.audit.report import authorship_rows, authorship_summary
from kernelgate.gates.base import Status
from kernelgate.pipeline import verify
from kernelgate.redteam.catalog import ROOT as REDTEAM
from kernelgate.sandbox.authorship import (
    MAX_KERNELS,
    authored_path,
    authorship_evidence,
    authorship_rule,
    bounded_kernels,
    default_min_share,
    is_declared_kernel,
    kernel_names_in,
    unqualified_parts,
)
from kernelgate.sandbox.session import WorkerSession
from kernelgate.verdict import Outcome

from .conftest import DATA, SOFTMAX, kernelgate

HERE = DATA / "authorship"
SOFTMAX_REFERENCE = SOFTMAX / "reference.py"


def profiled(candidate: Path, inputs: list[torch.Tensor]) -> dict[str, Any]:
    """The judge's authorship evidence for one call of ``candidate`` in a real worker,
    after a first call (as the gates' warm call would be)."""
    with WorkerSession(candidate, [], timeout=120) as session:  # entering loads it
        session.call(inputs, poison=0xFF, guard_bytes=0)
        return authorship_evidence(session.profile_authorship(inputs))


def by_name(evidence: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k["name"]: k for k in evidence["kernels"]}


# -- measured in a worker (CPU: Triton interpreter) --------------------------------------
def test_a_triton_candidate_is_all_but_authored() -> None:
    evidence = profiled(SOFTMAX / "honest.py", [torch.randn(30, 1000)])
    assert evidence["how"] == "cpu-interpreter"
    kernel = by_name(evidence)["_softmax_kernel"]
    assert kernel["authored"] is True and kernel["launches"] == 1
    assert kernel["device_time_s"] > 0
    # torch.empty_like beside the kernel is library time, a sliver of it
    assert not by_name(evidence)["aten::empty_like"]["authored"]
    assert evidence["authored_share"] > 0.95


def test_an_eager_port_is_not_authored_at_all() -> None:
    evidence = profiled(HERE / "eager_softmax.py", [torch.randn(30, 1000)])
    assert evidence["authored_share"] == 0.0
    assert evidence["kernels"] and not any(k["authored"] for k in evidence["kernels"])
    assert "aten::softmax" in by_name(evidence)  # top-level ops only: not aten::_softmax too
    assert "aten::_softmax" not in by_name(evidence)


def test_an_authored_kernel_beside_a_library_matmul_shares_the_time() -> None:
    a, b = torch.randn(64, 512), torch.randn(512, 96)
    evidence = profiled(HERE / "mixed.py", [a, b])
    kernels = by_name(evidence)
    assert kernels["_row_softmax"]["authored"] is True
    assert kernels["aten::matmul"]["authored"] is False
    assert kernels["aten::matmul"]["device_time_s"] > 0
    assert 0.0 < evidence["authored_share"] < 1.0
    # the interpreter's own copies run inside the launch: never counted as library time
    assert evidence["authored_s"] == pytest.approx(kernels["_row_softmax"]["device_time_s"])


def test_a_lazy_output_is_read_inside_the_profiled_call() -> None:
    """The candidate's kernel runs only when its output is read: reading it belongs to the
    call (a judged call reads it too), so the kernel is in the profile and authored."""
    evidence = profiled(REDTEAM / "defects" / "lazy_output.py", [torch.randn(30, 1000)])
    kernel = by_name(evidence)["_softmax_kernel"]
    assert kernel["authored"] is True and kernel["launches"] == 1
    assert evidence["authored_share"] > 0.95


# -- the rule in a verification ----------------------------------------------------------
def test_auth01_rejects_an_eager_port_with_the_gates_kept() -> None:
    verdict = verify(
        SOFTMAX_REFERENCE,
        HERE / "eager_softmax.py",
        only=["CMP-01"],
        min_authored_share=0.5,
    )
    assert verdict.verdict is Outcome.REJECTED
    assert verdict.failed_rules == ["AUTH-01"] and verdict.failed_gates == []
    assert verdict.gate("CMP-01").status is Status.PASS  # numerically right, not a kernel
    rule = next(r for r in verdict.rules if r.id == "AUTH-01")
    assert "0.0%" in rule.message and "aten::softmax" in rule.where
    assert verdict.authorship is not None and verdict.authorship["authored_share"] == 0.0


def test_the_flag_turns_the_rule_off_and_the_evidence_stays(tmp_path: Path) -> None:
    out = tmp_path / "evidence.json"
    args = ["verify", str(SOFTMAX_REFERENCE), str(HERE / "eager_softmax.py"), "--only", "CMP-01"]
    turned_off = kernelgate(
        *args, "--min-authored-share", "0.5", "--no-authorship-rule", "--json", str(out)
    )
    assert turned_off.returncode == 0, turned_off.stderr
    assert "authorship: 0.0% of device time in authored kernels" in turned_off.stdout
    evidence = json.loads(out.read_text())
    assert [r["id"] for r in evidence["rules"]] == ["FORBID-01"]  # no AUTH-01 entry
    assert evidence["authorship"]["authored_share"] == 0.0
    asked = kernelgate(*args, "--min-authored-share", "0.5")
    assert asked.returncode == 1, asked.stderr
    assert "rule AUTH-01 failed: 0.0% of device time" in asked.stdout


def test_a_minimum_outside_zero_to_one_is_a_usage_error() -> None:
    result = kernelgate(
        "verify",
        str(SOFTMAX_REFERENCE),
        str(HERE / "eager_softmax.py"),
        "--min-authored-share",
        "2",
    )
    assert result.returncode == 2


# -- judge side: the record is untrusted ------------------------------------------------
def record(*kernels: tuple[str, bool, float], **extra: Any) -> dict[str, Any]:
    return {
        "how": "cuda-kineto",
        "kernels": [
            {"name": n, "authored": a, "device_time_s": t, "launches": 1} for n, a, t in kernels
        ],
        **extra,
    }


def test_the_share_is_computed_by_the_judge_not_taken_from_the_worker() -> None:
    raw = record(("mine", True, 1.0), ("sgemm", False, 3.0), authored_share=1.0)
    evidence = authorship_evidence(raw)
    assert evidence["authored_share"] == 0.25
    assert authorship_rule(evidence, 0.5).status is Status.FAIL
    assert authorship_rule(evidence, 0.25).status is Status.PASS
    assert authorship_rule(evidence, 0.2).message.startswith("25.0% of device time")


@pytest.mark.parametrize(
    "raw",
    [
        "not a dict",
        {"how": "made-up", "kernels": []},
        record(("k", True, float("nan"))),
        record(("k", True, -1.0)),
        {"how": "cuda-kineto", "kernels": [{"name": "k"}]},
        {"how": "cuda-kineto", "kernels": 7},
    ],
)
def test_a_malformed_record_is_a_measurement_that_did_not_happen(raw: Any) -> None:
    evidence = authorship_evidence(raw)
    assert evidence["authored_share"] is None and evidence["why"]
    rule = authorship_rule(evidence, 0.5)
    assert rule.status is Status.SKIPPED and "not measured" in rule.message


def test_only_a_literal_true_is_authored_and_sizes_are_bounded() -> None:
    raw = record(("x" * 10_000, "yes", 1.0))  # type: ignore[arg-type]
    raw["kernels"] += [
        {"name": f"k{i}", "authored": True, "device_time_s": 1.0, "launches": 1}
        for i in range(1000)
    ]
    evidence = authorship_evidence(raw)
    assert len(evidence["kernels"]) <= MAX_KERNELS + 2
    assert len(evidence["kernels"][0]["name"]) <= 240
    assert evidence["kernels"][0]["authored"] is False


def test_no_kernel_at_all_is_no_authored_kernel() -> None:
    assert authorship_evidence(record())["authored_share"] == 0.0


def test_no_profiled_call_skips_the_rule_with_why() -> None:
    evidence = authorship_evidence(None, "the profiled call failed: boom")
    rule = authorship_rule(evidence, 0.5)
    assert rule.status is Status.SKIPPED and "boom" in rule.message


def test_bounded_kernels_sums_per_name_and_keeps_the_rest_as_two_entries() -> None:
    entries = [
        {"name": f"k{i % 100}", "authored": i % 2 == 0, "device_time_s": 1.0 + i % 100}
        for i in range(400)
    ]
    kept = bounded_kernels(entries)
    assert len(kept) == MAX_KERNELS
    assert kept[0] == {"name": "k99", "authored": False, "device_time_s": 400.0, "launches": 4}
    assert sum(k["device_time_s"] for k in kept) == pytest.approx(
        sum(e["device_time_s"] for e in entries)
    )
    assert {k["name"] for k in kept[-2:]} == {
        "(27 other authored kernels)",
        "(27 other library kernels)",
    }


# -- attribution by name and by file ----------------------------------------------------
def test_extension_kernels_are_matched_by_declared_name_outside_library_namespaces() -> None:
    source = """
    template <typename T> __global__ void scale_kernel(const T* x, T* y, int n) {}
    __global__ __launch_bounds__(256) void add_rows(float* x) {}
    extern "C" __global__ void static_helper() {}
    __device__ void not_a_kernel() {}
    """
    declared = kernel_names_in(source)
    assert declared == {"scale_kernel", "add_rows", "static_helper"}
    assert is_declared_kernel("void scale_kernel<float>(float const*, float*, int)", declared)
    assert is_declared_kernel("add_rows(float*)", declared)
    assert is_declared_kernel("void mine::add_rows(float*)", declared)
    # aten's kernel of the same name is aten's, whatever the candidate declares
    assert not is_declared_kernel(
        "void at::native::add_rows<4>(int, at::native::Func)", {"add_rows"}
    )
    assert not is_declared_kernel("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n", declared)
    assert unqualified_parts("void a::b::k<c::d<e>, 4>(int)") == ["a", "b", "k"]


def test_authored_files_are_the_candidates_folder_only(tmp_path: Path) -> None:
    folder = str(tmp_path / "cand")
    scratch = str(tmp_path / "cand" / "scratch")
    assert authored_path(f"{folder}/candidate.py", folder, [scratch])
    assert authored_path(f"{folder}/kernels/helper.py", folder, [scratch])
    assert not authored_path(f"{folder}x/candidate.py", folder, [scratch])
    assert not authored_path(f"{scratch}/inductor/abc.py", folder, [scratch])
    assert not authored_path(f"{folder}/.venv/lib/site-packages/lib/k.py", folder, [])
    kernelgate_dir = Path(__import__("kernelgate").__file__).resolve().parent
    kernelgate_file = str(kernelgate_dir / "kernels" / "k.py")
    assert not authored_path(kernelgate_file, "/", [])
    # the red team's candidates live in kernelgate: their own folder counts, no other
    controls = str(kernelgate_dir / "redteam" / "controls")
    assert authored_path(f"{controls}/softmax.py", controls, [])
    assert not authored_path(kernelgate_file, controls, [])
    assert not authored_path(str(kernelgate_dir / "redteam" / "defects" / "x.py"), controls, [])


# -- audits -----------------------------------------------------------------------------
def test_the_rule_is_on_by_default_for_kernel_writing_formats_only() -> None:
    assert default_min_share("cuda-l1") == default_min_share("kernelbench-run") == 0.5
    assert default_min_share("problem") == 0.5
    assert default_min_share("pairs") is None
    assert AuditOptions("out").min_share_for("cuda-l1") == 0.5
    assert AuditOptions("out").min_share_for("pairs") is None
    assert AuditOptions("out", min_authored_share=0.3).min_share_for("pairs") == 0.3
    assert AuditOptions("out", authorship_rule=False).min_share_for("cuda-l1") is None


def test_the_audit_summary_counts_a_histogram_and_auth01_failures() -> None:
    rows = [
        {"stage": "gates", "authored_share": 0.0, "failed_rules": ["AUTH-01"]},
        {"stage": "gates", "authored_share": 0.05, "failed_rules": ["AUTH-01"]},
        {"stage": "gates", "authored_share": 0.62, "failed_rules": []},
        {"stage": "gates", "authored_share": 1.0, "failed_rules": []},
        {"stage": "gates", "authored_share": None, "failed_rules": []},
        {"stage": "gates", "failed_rules": []},  # a row of an older store
        {"stage": "load", "authored_share": None, "failed_rules": []},  # never ran
    ]
    summary = authorship_summary(rows)
    assert summary["measured"] == 4 and summary["not_measured"] == 2
    assert summary["histogram"]["0.0-0.1"] == 2
    assert summary["histogram"]["0.6-0.7"] == 1
    assert summary["histogram"]["0.9-1.0"] == 1  # 1.0 falls in the last bin
    assert sum(summary["histogram"].values()) == 4
    assert summary["below_half"] == 2 and summary["auth01_failed"] == 2
    table = dict(authorship_rows({"authorship": summary}))
    assert table["rejected by AUTH-01"] == "2" and table["median share"] == "33.5%"
    assert summary["failed_build"] == 0 and table["an extension build failed"] == "0"


def test_the_summary_says_how_many_fell_back_after_a_failed_build() -> None:
    broken = [{"what": "torch extension relu", "error": "main.cpp:4:70: error: x"}]
    rows = [
        {
            "stage": "gates",
            "authored_share": 0.0,
            "failed_rules": ["AUTH-01"],
            "failed_builds": broken,
        },
        {"stage": "gates", "authored_share": 0.0, "failed_rules": ["AUTH-01"], "failed_builds": []},
        {"stage": "gates", "authored_share": 0.9, "failed_rules": [], "failed_builds": broken},
    ]
    summary = authorship_summary(rows)
    assert summary["failed_build"] == 2 and summary["auth01_failed_after_failed_build"] == 1
    table = dict(authorship_rows({"authorship": summary}))
    assert table["rejected by AUTH-01 after a failed build (fell back to PyTorch)"] == "1"


def test_a_rows_failed_builds_are_each_named_once_with_their_first_error() -> None:
    from kernelgate.audit.judge import FAILED_BUILDS_KEPT, failed_builds

    record = {
        "paid": [
            {"builds": [{"what": "ext a", "ok": False, "error": "a.cu(3): error: x"}]},
            {"builds": [{"what": "ext a", "ok": False}, {"what": "ext b", "ok": True}]},
            {"builds": [{"what": f"ext {i}", "ok": False} for i in range(5)]},
        ]
    }
    found = failed_builds(record)
    assert found[0] == {"what": "ext a", "error": "a.cu(3): error: x"}
    assert len(found) == FAILED_BUILDS_KEPT and all(b["what"] != "ext b" for b in found)
    assert failed_builds({}) == [] and failed_builds({"paid": None}) == []


def test_an_audit_applies_the_rule_and_reports_the_share(tmp_path: Path) -> None:
    """A pairs corpus (the rule off by default) audited with --min-authored-share: the eager
    port's row fails AUTH-01 with its share, the report counts it, and a resume must keep
    the option."""
    import sqlite3

    from .conftest import audit_command

    corpus = tmp_path / "corpus" / "eager"
    corpus.mkdir(parents=True)
    (corpus / "reference.py").write_text(SOFTMAX_REFERENCE.read_text())
    (corpus / "candidate.py").write_text((HERE / "eager_softmax.py").read_text())
    out = tmp_path / "out"
    command = audit_command(corpus.parent, out, "--only", "CMP-01", "--workers", "1")
    result = kernelgate(*command, "--min-authored-share", "0.5")
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(out / "audit.sqlite") as db:
        (data,) = db.execute("SELECT data FROM rows").fetchone()
    row = json.loads(data)
    assert row["verdict"] == "rejected" and row["failed_rules"] == ["AUTH-01"]
    assert row["authored_share"] == 0.0 and row["failed_gates"] == []
    assert "--min-authored-share 0.5" in row["replay"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["authorship"]["auth01_failed"] == 1
    assert summary["authorship"]["histogram"]["0.0-0.1"] == 1
    assert "Authored share of device time" in (out / "report.md").read_text()
    other = kernelgate(*command, "--resume")  # without the option: other settings
    assert other.returncode == 2 and "other settings" in other.stderr


class _EmptyTrace:
    """A profiler whose trace holds no device event, as every worker's did in the H200
    audit of 2026-12-04 (its own CUDA kernels included)."""

    def __init__(self, **_: Any) -> None:
        self.function_events: list[Any] = []

    def __enter__(self) -> _EmptyTrace:
        return self

    def __exit__(self, *_: Any) -> None:
        return None


def test_a_profiler_that_traces_no_device_work_is_a_measurement_that_did_not_happen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An empty trace of a known launch is not "no kernel ran": measure refuses, the worker
    reports why, and AUTH-01 is skipped with that reason instead of rejecting at share 0."""
    import torch.autograd.profiler as autograd_profiler
    from torch.profiler import ProfilerActivity

    from kernelgate.sandbox.authorship import AuthorshipProbe

    monkeypatch.setattr(autograd_profiler, "profile", _EmptyTrace)
    monkeypatch.setattr(autograd_profiler, "_supported_activities", lambda: {ProfilerActivity.CUDA})
    launched: list[str] = []
    probe = AuthorshipProbe()
    monkeypatch.setattr(probe, "_probe_launch", lambda: launched.append("probe"))
    called: list[str] = []
    with pytest.raises(RuntimeError, match="CUPTI"):
        probe.measure(lambda: called.append("call"), "cuda")
    assert launched == ["probe"] and called == []  # the candidate's call is not profiled
    with pytest.raises(RuntimeError, match="CUPTI"):  # asked once per worker
        probe.measure(lambda: called.append("call"), "cuda")
    assert launched == ["probe"]
    why = "the worker's authorship profile failed: RuntimeError: ... (CUPTI) ..."
    rule = authorship_rule(authorship_evidence(None, why), 0.5)
    assert rule.status is Status.SKIPPED and "CUPTI" in rule.message
