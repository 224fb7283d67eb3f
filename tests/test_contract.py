"""Contracts: derivation from a reference, the versioned JSON form, TOML files."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from kernelgate.contract import CONTRACT_SCHEMA, Contract, derive_contract, load_contract
from kernelgate.contract.spec import Dim, Layout, TensorSpec
from kernelgate.errors import ContractError
from kernelgate.formats.kernelbench import load_reference

from .conftest import DATA, SOFTMAX

FIXED_SIZE_REFERENCE = """
import torch
N = 64
HIDDEN = 8

class Model(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(8, hidden))

    def forward(self, x):
        assert x.shape[1] == 8, "the width is fixed by the weight"
        return x @ self.weight

def get_inputs():
    return [torch.randn(N, HIDDEN)]

def get_init_inputs():
    return [HIDDEN]
"""


def test_softmax_contract_names_its_dims() -> None:
    contract = derive_contract(load_reference(SOFTMAX / "reference.py"))
    assert [d.name for d in contract.dims] == ["batch_size", "dim"]
    assert all(d.varies and d.min == 1 for d in contract.dims)
    assert contract.inputs[0].shape == ["batch_size", "dim"]
    assert contract.outputs[0].shape == ["batch_size", "dim"]
    assert contract.provenance.source == "derived"
    assert contract.provenance.reference_sha256


def test_a_size_the_reference_rejects_is_fixed(tmp_path: Path) -> None:
    """A size is fixed only when the reference fails at every other size probed (the
    weight pins HIDDEN), and the contract says why; one failing probe no longer fixes a
    size (see tests/test_dims.py: it bounds the range instead)."""
    path = tmp_path / "ref.py"
    path.write_text(FIXED_SIZE_REFERENCE)
    contract = derive_contract(load_reference(path))
    dims = {d.name: d for d in contract.dims}
    assert dims["N"].varies is True and dims["N"].min == 1 and dims["N"].fixed_because is None
    hidden = dims["HIDDEN"]
    assert hidden.varies is False  # the weight pins it; found by running the reference
    assert hidden.probes is not None and not hidden.probes["passed"]
    assert {1, 7, 9, 16} <= set(hidden.probes["failed"])
    assert hidden.fixed_because and "the width is fixed by the weight" in hidden.fixed_because
    assert hidden.admits(8) and not hidden.admits(9)


def test_json_roundtrip_is_lossless() -> None:
    contract = derive_contract(load_reference(SOFTMAX / "reference.py"))
    again = Contract.from_json(contract.to_json())
    assert again == contract
    assert again.schema == CONTRACT_SCHEMA
    assert (
        isinstance(again.inputs[0], TensorSpec) and again.inputs[0].layouts[0] is Layout.CONTIGUOUS
    )


def test_toml_contract(tmp_path: Path) -> None:
    path = tmp_path / "softmax.toml"
    path.write_text("""
name = "softmax"
[[dims]]
name = "rows"
reference = 30
[[dims]]
name = "cols"
reference = 1000
max = 16777216
[[inputs]]
name = "x"
shape = ["rows", "cols"]
dtypes = ["float32"]
values = "finite"
[[outputs]]
name = "y"
shape = ["rows", "cols"]
dtype = "float32"
[postcondition]
reference = "torch.softmax(x, dim=1)"
""")
    contract = load_contract(path)
    assert contract.dim("cols") == Dim("cols", 1000, max=16777216)
    assert contract.inputs[0].values.value == "finite"
    assert contract.provenance.source == "file"


def test_malformed_contracts_say_what_is_wrong(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'name = "x"\ndims = []\ninputs = []\noutputs = []\nsurprise = 1\n'
        '[postcondition]\nreference = "r"\n'
    )
    with pytest.raises(ContractError, match="unknown field"):
        load_contract(bad)
    bad.write_text("name = ")
    with pytest.raises(ContractError, match="not valid TOML"):
        load_contract(bad)
    with pytest.raises(ContractError, match="not found"):
        load_contract(tmp_path / "missing.toml")


def test_value_ranges_fold_finite_values_and_keep_specials() -> None:
    import torch

    from kernelgate.inputs.distributions import fold_into_range

    x = torch.tensor([-3.5, -0.25, 0.5, 2.75, float("nan"), float("inf"), float("-inf")])
    folded = fold_into_range(x, 0.0, 1.0)
    assert folded[:4].tolist() == [0.5, 0.25, 0.5, 0.75]
    assert torch.isnan(folded[4]) and folded[5] == float("inf") and folded[6] == float("-inf")
    assert fold_into_range(x, None, 0.0)[:4].tolist() == [-3.5, -0.25, -0.5, -2.75]


def test_zero_structure_of_the_reference_inputs_is_part_of_the_domain() -> None:
    """Inputs that get_inputs() builds triangular stay triangular in every generated case,
    so a candidate that relies on it (as KernelBench's triangular-matmul problems allow) is
    judged on the problem it was given."""
    from kernelgate.inputs.distributions import impose_structure, structure_of

    contract = derive_contract(load_reference(DATA / "triu_matmul_reference.py"))
    assert [spec.structure for spec in contract.inputs] == ["upper-triangular"] * 2
    assert Contract.from_dict(contract.to_dict()).inputs[0].structure == "upper-triangular"
    plain = derive_contract(load_reference(SOFTMAX / "reference.py"))
    assert all(spec.structure is None for spec in plain.inputs)
    x = torch.randn(6, 6)
    assert structure_of([x.tril(), x.tril()]) == "lower-triangular"
    assert structure_of([x, x.triu()]) is None  # one sample is not triangular
    assert structure_of([torch.eye(6)]) is None  # diagonal: both, left alone
    assert torch.equal(impose_structure(x, "upper-triangular"), x.triu())


def test_a_candidate_relying_on_declared_structure_is_verified(tmp_path: Path) -> None:
    import json

    import kernelgate
    from kernelgate.contract.derive import contract_for

    reference, candidate = DATA / "triu_matmul_reference.py", DATA / "triu_matmul_candidate.py"
    verdict = kernelgate.verify(reference, candidate, device="cpu")
    failed = [(g.id, g.reason) for g in verdict.gates if g.status.value == "fail"]
    assert verdict.verdict.value == "verified", failed
    # the same contract without the structure admits full matrices, and the candidate fails
    unstructured = contract_for(load_reference(reference)).to_dict()
    for spec in unstructured["inputs"]:
        spec["structure"] = None
    (tmp_path / "contract.json").write_text(json.dumps(unstructured))
    verdict = kernelgate.verify(reference, candidate, tmp_path / "contract.json", device="cpu")
    assert verdict.verdict.value == "rejected" and "CMP-01" in verdict.failed_gates
