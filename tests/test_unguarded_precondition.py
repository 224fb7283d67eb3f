"""Unguarded preconditions: a kernel that faults only on layouts the reference never sends.

On the CPU a device fault is played by a candidate that reads address 16 (SIGSEGV) where a
GPU kernel would hit a misaligned or illegal address: only on misaligned views
(``cmp_faults_misaligned``) or only on non-contiguous ones (``cmp_faults_noncontiguous``).
CMP-02 narrows such a kernel to the layouts it handled and names the fault; ``--strict``
rejects it; at the reference's own layout the same fault stays a RES-01 rejection.

Every fault costs a fresh worker (torch and Triton imported again), so the contracts here
admit few layouts: the derived one (contiguous, offset: one CMP-02 case) where it will do.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import kernelgate
from kernelgate.contract.spec import Layout
from kernelgate.domain import fault_of
from kernelgate.gates.base import Incident, Status
from kernelgate.inputs.layouts import layout_of
from kernelgate.pipeline import spawned_worker
from kernelgate.verdict import Outcome, Verdict, combine

from .conftest import DATA
from .conftest import kernelgate as cli

EW = DATA / "cmp_ew_reference.py"
OFFSET = "layout=offset (16-byte misaligned)"
SEGFAULT = "crash: worker killed by signal SIGSEGV"


@pytest.fixture(scope="module")
def misaligned_fault() -> Verdict:
    """The misaligned-only faulting kernel under the derived contract (contiguous and
    offset), judged by CMP-02 and then MEM-01, which must still run, in a fresh worker."""
    return kernelgate.verify(EW, DATA / "cmp_faults_misaligned.py", only=["CMP-02", "MEM-01"])


def test_fault_only_on_misaligned_views_narrows_and_names_the_fault(misaligned_fault) -> None:
    verdict = misaligned_fault
    assert verdict.verdict is Outcome.NARROWED, [(g.id, g.reason) for g in verdict.gates]
    assert verdict.failed_gates == ["CMP-02", "RES-01"]
    cmp02 = verdict.gate("CMP-02")
    unguarded = cmp02.evidence["unguarded_precondition"]
    assert unguarded == {
        "faults": [SEGFAULT],
        "layouts": [OFFSET],
        "summary": f"{SEGFAULT} on {OFFSET}",
    }
    assert cmp02.evidence["per_layout"][OFFSET] == {"status": "fail", "faulted": SEGFAULT}
    assert cmp02.counterexample.findings[0]["problem"] == "faulted"
    assert cmp02.counterexample.inputs[0]["byte_misalignment_16"] != 0
    domain = verdict.verified_domain
    assert domain["contract"]["inputs"][0]["layouts"] == ["contiguous"]
    assert [e["gate"] for e in domain["unguarded_precondition"]] == ["CMP-02"]
    assert verdict.unguarded_precondition == domain["unguarded_precondition"]
    assert verdict.to_dict()["unguarded_precondition"][0]["layouts"] == [OFFSET]


def test_the_judge_goes_on_in_a_fresh_worker_after_each_fault(misaligned_fault) -> None:
    res01 = misaligned_fault.gate("RES-01")
    incidents = res01.evidence["incidents"]
    assert [i["domain_point"] for i in incidents] == [OFFSET]
    assert all(i["kind"] == "crash" and "SIGSEGV" in i["unguarded_precondition"] for i in incidents)
    assert res01.evidence["worker_starts"] >= 1 + len(incidents)  # one fresh worker per fault
    assert misaligned_fault.gate("MEM-01").status is Status.PASS  # ran after the faults


def test_strict_rejects_an_unguarded_precondition(misaligned_fault) -> None:
    assert combine(misaligned_fault.gates)[0] is Outcome.NARROWED
    assert combine(misaligned_fault.gates, strict=True)[0] is Outcome.REJECTED


def test_cli_strict_rejects_and_says_why(tmp_path: Path) -> None:
    out = tmp_path / "evidence.json"
    result = cli(
        "verify",
        str(EW),
        str(DATA / "cmp_faults_misaligned.py"),
        "--only",
        "CMP-02",
        "--strict",
        "--json",
        str(out),
        timeout=900,  # a loaded CI machine: the fault costs a fresh worker
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"unguarded precondition (CMP-02, rejected: --strict): {SEGFAULT}" in result.stdout
    evidence = json.loads(out.read_text())
    assert evidence["verdict"] == "rejected" and evidence["strict"] is True
    assert evidence["verified_domain"] is None
    (entry,) = evidence["unguarded_precondition"]
    assert entry["faults"] == [SEGFAULT] and entry["layouts"] == [OFFSET]
    (cmp02,) = [g for g in evidence["gates"] if g["id"] == "CMP-02"]
    # the replay command points at the evidence, whose stored verify command keeps --strict
    assert cmp02["counterexample"]["replay"].startswith("kernelgate replay ")
    assert "--strict" in cmp02["counterexample"]["verify"]


def test_a_fault_at_the_references_own_layout_is_a_res01_rejection() -> None:
    """A kernel that faults on every non-contiguous view, when the reference itself sends a
    transposed one: the strided fault is excused (a layout the reference never has), the
    transposed one is not (the reference's own layout), and RES-01 rejects."""
    verdict = kernelgate.verify(
        DATA / "cmp_ew_transposed_reference.py",
        DATA / "cmp_faults_noncontiguous.py",
        DATA / "cmp_ew_transposed.toml",
        only=["CMP-02"],
    )
    assert verdict.verdict is Outcome.REJECTED, [(g.id, g.reason) for g in verdict.gates]
    res01 = verdict.gate("RES-01")
    assert res01.status is Status.FAIL
    incidents = {i["case"]: i for i in res01.evidence["incidents"]}
    assert list(incidents) == ["layout=strided", "layout=transposed"]
    assert incidents["layout=strided"]["unguarded_precondition"] == SEGFAULT
    assert incidents["layout=transposed"]["domain_point"] is None
    assert incidents["layout=transposed"]["unguarded_precondition"] is None
    assert verdict.gate("CMP-02").status is Status.SKIPPED  # aborted by the incident


def test_layout_of_names_the_references_own_layouts() -> None:
    x = torch.randn(4, 6)
    assert layout_of(x) == (Layout.CONTIGUOUS, False)
    assert layout_of(x.t()) == (Layout.TRANSPOSED, False)
    assert layout_of(x[:, ::2]) == (Layout.STRIDED, False)
    assert layout_of(x[:1].expand(4, 6)) == (Layout.EXPANDED, False)
    assert layout_of(x.view(-1)[1:]) == (Layout.CONTIGUOUS, True)  # 4 bytes off alignment
    assert layout_of(x.view(-1)[4:]) == (Layout.CONTIGUOUS, False)  # 16 bytes: aligned


@pytest.mark.parametrize(
    ("kind", "detail", "fault"),
    [
        ("crash", "worker killed by signal SIGSEGV", True),
        ("crash", "worker killed by signal SIGBUS", True),
        ("crash", "worker killed by signal SIGKILL", False),  # resource limits, not a fault
        ("device-fault", "RuntimeError: CUDA error: misaligned address", True),
        ("exception", "RuntimeError: CUDA error: an illegal memory access was encountered", True),
        ("exception", "ValueError: x must be contiguous", False),
        ("exit", "worker exited with code 0 in mid-call", False),
        ("timeout", "no answer within 60 s", False),
    ],
)
def test_fault_of_tells_faults_from_refusals_and_hangs(kind: str, detail: str, fault: bool) -> None:
    named = fault_of(Incident("CMP-02", "layout=strided", 0, kind, detail))
    assert (named is not None) == fault
    if fault:
        assert detail in named


def test_a_device_faulted_worker_is_retired_before_the_next_call() -> None:
    """The worker exits after reporting a sticky device error; the session lets it go at
    once, so the next call starts a fresh worker instead of meeting the dying one."""
    session = spawned_worker(DATA / "cmp_honest.py", device="cpu", timeout=60)
    session.init_inputs = []
    with session:
        refusal = session._refused({"ok": False, "error": "ValueError: no"})
        assert refusal.kind == "exception" and session.alive  # a clean error keeps it
        incident = session._refused(
            {"ok": False, "device_fault": True, "error": "RuntimeError: CUDA error: misaligned"}
        )
        assert incident.kind == "device-fault" and not session.alive


@pytest.mark.gpu
def test_a_real_misaligned_address_on_an_offset_view_is_an_unguarded_precondition() -> None:
    """On the device: float4 loads from a view one element off 16-byte alignment raise
    CUDA's "misaligned address" (a sticky fault: the worker is replaced). Every other gate
    runs after it in fresh workers and passes, so the kernel is narrowed to contiguous
    inputs, the fault named; strict judging rejects it."""
    verdict = kernelgate.verify(EW, DATA / "cuda_silu_float4.py", device="cuda", timeout=30)
    failed = [(g.id, g.reason) for g in verdict.gates if g.status is Status.FAIL]
    assert verdict.verdict is Outcome.NARROWED, failed
    assert {g for g, _ in failed} == {"CMP-02", "RES-01"}, failed
    (entry,) = verdict.unguarded_precondition
    assert entry["layouts"] == [OFFSET]
    assert all("misaligned address" in fault for fault in entry["faults"]), entry
    incidents = verdict.gate("RES-01").evidence["incidents"]
    assert [(i["kind"], i["domain_point"]) for i in incidents] == [("device-fault", OFFSET)]
    assert verdict.gate("RES-01").evidence["worker_starts"] >= 2
    assert verdict.verified_domain["contract"]["inputs"][0]["layouts"] == ["contiguous"]
    assert combine(verdict.gates, strict=True)[0] is Outcome.REJECTED


def test_audit_summaries_name_unguarded_preconditions() -> None:
    """A row's ``unguarded_precondition`` (judge.py) reaches summary.json's rows, a count
    by verdict, and a table of the report naming the record, the fault and the layouts."""
    from kernelgate.audit import judge
    from kernelgate.audit.report import _markdown, summarize
    from kernelgate.formats.corpus import CorpusRecord

    def row(name: str, verdict: str, unguarded: list[str]) -> dict:
        record = CorpusRecord(id=name, format="pairs", reference_source="", candidate_source="")
        return judge.base_row(record) | {
            "verdict": verdict,
            "stage": "gates",
            "old_check": "accepted",
            "old_check_current": "accepted",
            "old_check_detail": {"status": "accepted"},
            "seconds": 10.0,
            "gates": [],
            "failed_gates": ["CMP-02", "RES-01"] if unguarded else [],
            "unguarded_precondition": unguarded,
        }

    fault = f"CMP-02: device fault: RuntimeError: CUDA error: misaligned address on {OFFSET}"
    rows = [row("vec4", "narrowed", [fault]), row("plain", "verified", [])]
    summary = summarize(rows, {"device": "cuda", "source": "corpus.jsonl", "format": "cuda-l1"})
    assert summary["unguarded_precondition"] == {"records": 1, "by_verdict": {"narrowed": 1}}
    assert [r["unguarded_precondition"] for r in summary["rows"]] == [[fault], []]
    report = _markdown(summary, {})
    assert "Unguarded preconditions" in report
    assert f"| vec4 | narrowed | {fault} |" in report
