"""The Gated DeltaNet backward example (examples/gdn_backward/): each candidate's gradients
against the reference's, defects rejected by CMP-01, and (GPU) the twelve gates.

Two candidates: candidate.py (the default, "staged" kernels) and candidate_registers.py
(chunk.FORWARD = chunk.BACKWARD = "registers", opt-in until the gates verify it). Without
CUDA the kernels run under the Triton interpreter (fp32 only). The full CPU verify of the
example takes minutes (200-440 s), so it is not run here; see examples/gdn_backward/README.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernelgate.kernels.gdn import chunk as gdn_chunk

from ._example import (
    CANDIDATES,
    assert_gradients_match,
    assert_verified_on_gpu,
    counting_calls,
    evidence_folder,
    resized_contract,
)
from ._example import load as _load
from ._example import verify as _verify
from ._measure import ensemble_ratio, tf32_create_dot

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gdn_backward"
GRAD_NAMES = ("dq", "dk", "dv", "dg", "dbeta", "dh0")
FP32_TOL = 1e-5
# Where the GPU test writes its verdicts' evidence (a folder), when set.
EVIDENCE_ENV = "KERNELGATE_GDN_BWD_EVIDENCE"


def _inputs(batch, seq_len, heads, dim_k, dim_v, seed, device="cpu"):
    """The reference's input distribution at the given sizes (float32)."""
    reference = _load(EXAMPLE / "reference.py", "gdn_bwd_reference")
    sizes = dict(
        batch_size=batch, seq_len=seq_len, num_heads=heads, head_dim_k=dim_k, head_dim_v=dim_v
    )
    for name, value in sizes.items():
        setattr(reference, name, value)
    torch.manual_seed(seed)
    return [x.to(device) for x in reference.get_inputs()]


@pytest.mark.parametrize("path", list(CANDIDATES))
@pytest.mark.parametrize(
    "shape",
    [(1, 70, 2, 16, 16), (2, 17, 1, 20, 24), (1, 130, 1, 32, 16)],
    ids=lambda s: "B{}T{}H{}K{}V{}".format(*s),
)
def test_candidate_gradients_match_float64_reference(shape, path):
    """Every gradient of the candidate (fp32 kernels) within 1e-5 relative error of the
    reference's float64 autograd of the recurrence, on the same input values; the candidate
    leaves its inputs untouched and returns fresh tensors of the inputs' dtypes."""
    assert_gradients_match(
        _load(EXAMPLE / "reference.py", "gdn_bwd_reference").Model(),
        _load(EXAMPLE / CANDIDATES[path], f"gdn_bwd_candidate_{path}").ModelNew(),
        _inputs(*shape, seed=sum(shape)),
        GRAD_NAMES,
        (0, 1, 2, 3, 4, 6),
        FP32_TOL,
    )


def test_registers_candidate_runs_the_registers_paths_and_restores_the_defaults(monkeypatch):
    """candidate_registers.py runs the register-resident forward and backward once per call
    (the staged candidate neither), and leaves chunk.FORWARD and chunk.BACKWARD as it found
    them, so that the gates judge the path it names whatever the defaults are."""
    names = ("chunk_gated_delta_rule_fwd_registers", "_chunk_bwd_registers")
    inputs = _inputs(1, 20, 1, 16, 16, seed=5)
    # (candidate, the defaults when it is called, calls of each registers launcher)
    for path, default, expected in (
        ("registers", "staged", 1),
        ("registers", "registers", 1),
        ("staged", "staged", 0),  # candidate.py follows the defaults, as it always has
    ):
        candidate = _load(EXAMPLE / CANDIDATES[path], f"gdn_bwd_candidate_{path}").ModelNew()
        monkeypatch.setattr(gdn_chunk, "FORWARD", default)
        monkeypatch.setattr(gdn_chunk, "BACKWARD", default)
        with counting_calls(monkeypatch, gdn_chunk, names) as counts, torch.no_grad():
            candidate(*inputs)
        assert counts == dict.fromkeys(names, expected), (path, default, counts)
        assert (default, default) == (gdn_chunk.FORWARD, gdn_chunk.BACKWARD), path


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU mode: emulates the device's dots")
def test_bf16_fp32_gradients_within_the_honest_bound_with_tf32_dots(monkeypatch):
    """The bf16 contract's fp32 outputs dg and dh0 against its ensemble bound, 16 x (the
    honest run's worst error + 2 u |ref|), the honest run being reference_bf16 natively (fp32
    compute), with the interpreter's dots rounding their operands as the device's TF32 does.
    The kernels' 16-bit path used TF32 dots on fp32 intermediates: 56-98x the bound for dg and
    63-110x for dh0 here (60-160x and 115x on the H200). Computing 16-bit inputs as fp32 copies
    (IEEE dots), they are below 0.25x (benchmarks/gdn_bwd_dot_precision.py has the table).
    candidate.py only: this emulation rounds every non-IEEE dot as TF32, which would judge
    candidate_registers.py's tf32x3 dots (about fp32) as plain TF32."""
    from triton.runtime import interpreter

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", tf32_create_dot)
    reference = _load(EXAMPLE / "reference_bf16.py", "gdn_bwd_reference_bf16")
    candidate = _load(EXAMPLE / "candidate.py", "gdn_bwd_candidate").ModelNew()
    torch.manual_seed(0)
    inputs = reference.get_inputs()
    with torch.no_grad():
        exact = reference.Model()(*[x.double() for x in inputs])
        honest = reference.Model()(*inputs)
        got = candidate(*inputs)
    for name, index in (("dg", 3), ("dh0", 5)):
        assert got[index].dtype == torch.float32, name
        ratio = ensemble_ratio(got[index], exact[index], honest[index])
        assert ratio <= 1.0, (name, ratio)


# B=1, T=20, H=1, K=V=16: CMP-01 under the interpreter in well under a minute, with the
# example's inputs, domains and outputs.
TINY = {"batch_size": 1, "seq_len": 20, "num_heads": 1, "head_dim_k": 16, "head_dim_v": 16}


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU mode: the interpreter's tiny run")
@pytest.mark.parametrize("defect", ["defect_ignores_dht.py", "defect_dbeta_dropped.py"])
def test_defective_backward_rejected_by_cmp01(defect, tmp_path):
    """A backward that drops dht's contribution, or dbeta altogether, fails CMP-01 on the
    tiny contract, with a counterexample; the honest candidate passes the same run."""
    contract = resized_contract(EXAMPLE / "contract.toml", TINY, tmp_path / "contract.toml")
    for name, expected in ((defect, "fail"), ("candidate.py", "pass")):
        evidence, log = _verify(
            str(EXAMPLE / "reference.py"),
            str(EXAMPLE / name),
            "--contract",
            str(contract),
            "--only",
            "CMP-01",
            str(tmp_path / f"{name}.json"),
            timeout=600,
        )
        gate = next(g for g in evidence["gates"] if g["id"] == "CMP-01")
        assert gate["status"] == expected, (name, gate["reason"], log[-2000:])
        if expected == "fail":
            assert evidence["verdict"] == "rejected"
            assert gate["counterexample"] is not None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize(
    "path, reference, contract, evidence",
    [
        ("staged", "reference.py", "contract.toml", "gdn-bwd-verify-contract.json"),
        ("staged", "reference_bf16.py", "contract_bf16.toml", "gdn-bwd-verify-contract_bf16.json"),
        ("registers", "reference.py", "contract.toml", "gdn-bwd-verify-registers-fp32.json"),
        (
            "registers",
            "reference_bf16.py",
            "contract_bf16.toml",
            "gdn-bwd-verify-registers-bf16.json",
        ),
    ],
    ids=["fp32", "bf16", "registers-fp32", "registers-bf16"],
)
def test_backward_example_verified_on_gpu(path, reference, contract, evidence, tmp_path):
    """The twelve gates on the device, fp32 and bf16, for each candidate: verified. The
    evidence goes to the folder named by KERNELGATE_GDN_BWD_EVIDENCE when it is set (the
    staged candidate's files keep the names earlier device runs wrote)."""
    assert_verified_on_gpu(
        EXAMPLE / reference,
        EXAMPLE / CANDIDATES[path],
        EXAMPLE / contract,
        evidence_folder((EVIDENCE_ENV,), tmp_path) / evidence,
    )
