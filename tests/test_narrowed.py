"""The `narrowed` outcome: only domain gates fail, and the verdict states what passed."""

from __future__ import annotations

import json
from pathlib import Path

import kernelgate
from kernelgate.contract.load import load_contract
from kernelgate.domain import narrowable, narrowed_contract
from kernelgate.gates.base import GateKind, GateResult, Status

from .conftest import DATA, SOFTMAX
from .test_cli import kernelgate as cli


def _gate(gate_id: str, status: Status, evidence: dict | None = None) -> GateResult:
    return GateResult(gate_id, GateKind.EXACT, gate_id, status, "r", evidence=evidence or {})


def test_only_domain_failures_with_a_sub_domain_narrow() -> None:
    sub = {"sub_domain": {"layouts": {"x": ["contiguous"]}}}
    ok = _gate("CMP-01", Status.PASS)
    assert narrowable([ok, _gate("CMP-02", Status.FAIL, sub)])
    assert not narrowable([_gate("CMP-01", Status.FAIL), _gate("CMP-02", Status.FAIL, sub)])
    assert not narrowable([ok, _gate("CMP-02", Status.FAIL)])  # no stated sub-domain
    untagged = {"incidents": [{"kind": "exception", "domain_point": None}]}
    tagged = {"incidents": [{"kind": "exception", "domain_point": "n=7"}]}
    assert not narrowable(
        [_gate("CMP-02", Status.FAIL, sub), _gate("RES-01", Status.FAIL, untagged)]
    )
    assert narrowable([_gate("CMP-02", Status.FAIL, sub), _gate("RES-01", Status.FAIL, tagged)])
    # an access-trace finding beside incidents outside the domain: no sub-domain mends it
    traced = tagged | {"access_trace": {"findings": [{"kind": "uninitialised read"}]}}
    assert not narrowable([_gate("CMP-02", Status.FAIL, sub), _gate("RES-01", Status.FAIL, traced)])
    # a finding seen only in CMP-02 cases at the layouts it drops narrows like those cases;
    # seen once more anywhere else (the reference's layout in CMP-01), it rejects
    dropped = sub | {"per_layout": {"layout=strided": {"status": "fail"}}}
    outside = {"kind": "out-of-bounds", "sites": [["CMP-02", "layout=strided"]]}
    inside = outside | {"sites": [["CMP-02", "layout=strided"], ["CMP-01", "normal"]]}
    for finding, expected in [(outside, True), (inside, False)]:
        trace = {"incidents": [], "access_trace": {"findings": [finding]}}
        gates = [_gate("CMP-02", Status.FAIL, dropped), _gate("RES-01", Status.FAIL, trace)]
        assert narrowable(gates) is expected
    contract, changes = narrowed_contract(
        load_contract(DATA / "cmp_ew_strided.toml"), [_gate("CMP-02", Status.FAIL, sub)]
    )
    assert [lay.value for lay in contract.inputs[0].layouts] == ["contiguous"]
    assert changes and "strided" in changes[0]


def test_cli_narrows_contiguous_only_kernel_to_contiguous_layouts(tmp_path: Path) -> None:
    out = tmp_path / "evidence.json"
    result = cli(
        "verify",
        str(DATA / "cmp_ew_reference.py"),
        str(DATA / "cmp_contiguous_only.py"),
        "--contract",
        str(DATA / "cmp_ew_strided.toml"),
        "--json",
        str(out),
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert "narrowed" in result.stdout and "verified sub-domain" in result.stdout
    evidence = json.loads(out.read_text())
    # the kernel reads past a strided view's end; the interpreter's access trace sees it
    # (RES-01), only in CMP-02's cases at layouts the narrowed domain drops (expanded views:
    # fewer elements than it reads)
    assert evidence["verdict"] == "narrowed" and evidence["failed_gates"] == ["CMP-02", "RES-01"]
    res01 = next(g for g in evidence["gates"] if g["id"] == "RES-01")
    sites = [s for f in res01["evidence"]["access_trace"]["findings"] for s in f["sites"]]
    cmp02 = next(g for g in evidence["gates"] if g["id"] == "CMP-02")
    failed = {k for k, v in cmp02["evidence"]["per_layout"].items() if v.get("status") == "fail"}
    assert sites and all(gate == "CMP-02" and case in failed for gate, case in sites)
    domain = evidence["verified_domain"]
    assert domain["contract"]["schema"] == "kernelgate.contract/4"
    assert domain["contract"]["inputs"][0]["layouts"] == ["contiguous", "offset"]
    assert domain["rests_on"] == ["CMP-02"]
    assert "CMP-02" in evidence["thresholded"] and "MEM-01" in evidence["tolerance_free"]


def test_refusal_outside_the_domain_narrows_to_the_fixed_dim() -> None:
    verdict = kernelgate.verify(
        DATA / "narrow_linear_reference.py", DATA / "narrow_linear_fixed.py"
    )
    assert verdict.verdict.value == "narrowed", [
        (g.id, g.status.value, g.reason) for g in verdict.gates
    ]
    incidents = verdict.gate("RES-01").evidence["incidents"]
    assert incidents and all(i["domain_point"].startswith("in_features=") for i in incidents)
    dims = {d["name"]: d for d in verdict.verified_domain["contract"]["dims"]}
    assert dims["in_features"]["varies"] is False and dims["in_features"]["min"] == 24
    assert dims["batch"]["varies"] is True


def test_float32_only_kernel_is_narrowed_to_float32() -> None:
    """The softmax library contract admits fp16 and bf16; a kernel that refuses them is
    verified on the float32 part of the domain, not rejected."""
    verdict = kernelgate.verify(
        SOFTMAX / "reference.py", DATA / "prc_softmax_fp32_only.py", only=["PRC-01"]
    )
    assert verdict.verdict.value == "narrowed", [(g.id, g.reason) for g in verdict.gates]
    domain = verdict.verified_domain
    assert domain["contract"]["inputs"][0]["dtypes"] == ["float32"]
    assert any("dtypes without" in change for change in domain["changes"])
    assert verdict.gate("PRC-01").evidence["sub_domain"]["dtypes"]["arg0"] == ["float32"]


def test_replay_names_the_contract_file_it_was_judged_by(tmp_path: Path) -> None:
    """A counterexample under a hand-written contract replays under the same contract."""
    contract = DATA / "cmp_ew_strided.toml"
    verdict = kernelgate.verify(
        DATA / "cmp_ew_reference.py",
        DATA / "cmp_contiguous_only.py",
        contract=contract,
        only=["CMP-02"],
    )
    replay = verdict.gate("CMP-02").counterexample.replay
    assert f"--contract {contract}" in replay
