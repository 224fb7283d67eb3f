"""The Gated DeltaNet forward example (examples/gdn/): each candidate's output against the
reference's, and (GPU) the twelve gates.

Two candidates: candidate.py (the default, "staged" forward) and candidate_registers.py
(chunk.FORWARD = "registers", opt-in until the gates verify it). Without CUDA the kernels run
under the Triton interpreter. The full CPU verify takes minutes, so it is not run here; the
commands and the verdicts are in docs/kernels/gdn.md ("Twelve gates on the register-resident
paths").
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from kernelgate.kernels.gdn import chunk as gdn_chunk

from ._example import CANDIDATES, assert_verified_on_gpu, counting_calls, evidence_folder
from ._example import load as _load
from ._measure import rel_err

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "gdn"
FP32_TOL = 1e-5
# Where the GPU test writes its verdicts' evidence (a folder): the first of these that is
# set, so that one variable serves a device run of both GDN example files.
EVIDENCE_ENVS = ("KERNELGATE_GDN_EVIDENCE", "KERNELGATE_GDN_BWD_EVIDENCE")


def _inputs(batch, seq_len, heads, dim_k, dim_v, seed):
    """The reference's input distribution at the given sizes (float32)."""
    reference = _load(EXAMPLE / "reference.py", "gdn_fwd_reference")
    sizes = dict(
        batch_size=batch, seq_len=seq_len, num_heads=heads, head_dim_k=dim_k, head_dim_v=dim_v
    )
    for name, value in sizes.items():
        setattr(reference, name, value)
    torch.manual_seed(seed)
    return reference.get_inputs()


@pytest.mark.parametrize("path", list(CANDIDATES))
@pytest.mark.parametrize(
    "shape",
    [(2, 130, 2, 32, 32), (1, 17, 1, 20, 24)],
    ids=lambda s: "B{}T{}H{}K{}V{}".format(*s),
)
def test_candidate_output_matches_float64_reference(shape, path):
    """The candidate's o (fp32 kernels) within 1e-5 relative error of the reference's
    recurrence in float64 on the same values, at the example's shape (T = 130: a ragged
    third chunk) and at head sizes that are not powers of two; inputs untouched, a fresh
    fp32 output."""
    reference = _load(EXAMPLE / "reference.py", "gdn_fwd_reference").Model()
    candidate = _load(EXAMPLE / CANDIDATES[path], f"gdn_fwd_candidate_{path}").ModelNew()
    inputs = _inputs(*shape, seed=sum(shape))
    before = [x.clone() for x in inputs]
    with torch.no_grad():  # as the judge calls both
        expected = reference(*[x.double() for x in inputs])
        got = candidate(*inputs)
    assert got.dtype == torch.float32 and got.shape == expected.shape
    error = rel_err(got, expected)
    assert error <= FP32_TOL, error
    for x, y in zip(inputs, before, strict=True):
        assert torch.equal(x, y)
    assert got.untyped_storage().data_ptr() not in {x.untyped_storage().data_ptr() for x in inputs}


def test_registers_candidate_runs_the_registers_forward_and_restores_the_default(monkeypatch):
    """candidate_registers.py runs the register-resident forward once per call (candidate.py,
    under the staged default, does not), and leaves chunk.FORWARD as it found it, so that
    the gates judge the path it names whatever the default is."""
    names = ("chunk_gated_delta_rule_fwd_registers",)
    inputs = _inputs(1, 20, 1, 16, 16, seed=5)
    # (candidate, the default when it is called, calls of the registers launcher)
    for path, default, expected in (
        ("registers", "staged", 1),
        ("registers", "registers", 1),
        ("staged", "staged", 0),  # candidate.py follows the default, as it always has
    ):
        candidate = _load(EXAMPLE / CANDIDATES[path], f"gdn_fwd_candidate_{path}").ModelNew()
        monkeypatch.setattr(gdn_chunk, "FORWARD", default)
        with counting_calls(monkeypatch, gdn_chunk, names) as counts, torch.no_grad():
            candidate(*inputs)
        assert counts == dict.fromkeys(names, expected), (path, default, counts)
        assert default == gdn_chunk.FORWARD, path


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("path", list(CANDIDATES))
def test_forward_example_verified_on_gpu(path, tmp_path):
    """The twelve gates on the device (the contract is fp32 only): verified. The evidence,
    gdn-verify-<path>.json, goes to the folder named by KERNELGATE_GDN_EVIDENCE (or else
    KERNELGATE_GDN_BWD_EVIDENCE) when one is set."""
    assert_verified_on_gpu(
        EXAMPLE / "reference.py",
        EXAMPLE / CANDIDATES[path],
        EXAMPLE / "contract.toml",
        evidence_folder(EVIDENCE_ENVS, tmp_path) / f"gdn-verify-{path}.json",
    )
