"""The built-in library: declarative entries, matching references by their aten ops."""

from __future__ import annotations

import torch

from kernelgate.contract.derive import contract_for, derive_contract
from kernelgate.contract.library import LIBRARY, entry
from kernelgate.contract.match import has_reduction, match_entry, record_ops
from kernelgate.contract.spec import Layout
from kernelgate.formats.kernelbench import load_reference

from .conftest import DATA, SOFTMAX

REQUIRED = {
    "relu",
    "gelu",
    "sigmoid",
    "tanh",
    "exp",
    "add",
    "mul",
    "sub",
    "div",
    "sum",
    "mean",
    "max",
    "softmax",
    "log_softmax",
    "layer_norm",
    "rms_norm",
    "matmul",
    "linear",
}


def test_library_covers_the_required_ops_declaratively() -> None:
    names = {e.name for e in LIBRARY}
    assert names >= REQUIRED
    for e in LIBRARY:
        assert e.error_model in ("elementwise", "order")
        assert set(e.dtypes) <= {"float32", "float16", "bfloat16"}
        assert Layout.CONTIGUOUS in e.layouts
        assert all(all(op.startswith("aten::") for op in sig) for sig in e.signatures)
    assert Layout.EXPANDED in entry("add").layouts
    assert entry("conv").tf32_default and not entry("matmul").tf32_default
    signatures = [sig for e in LIBRARY for sig in e.signatures]
    assert len(signatures) == len(set(signatures))  # no op sequence names two entries


def test_softmax_reference_gets_the_library_contract() -> None:
    program = load_reference(SOFTMAX / "reference.py")
    assert record_ops(program) == ["aten::_softmax"]
    contract = contract_for(program)
    derived = derive_contract(program)
    assert contract.provenance.source == "library"
    assert "'softmax'" in contract.provenance.detail
    assert contract.postcondition.error_model.name == "order"
    assert contract.postcondition.error_model.params["entry"] == "softmax"
    # dims come from derivation: the library contract builds on it
    assert [d.name for d in contract.dims] == [d.name for d in derived.dims]
    assert contract.inputs[0].shape == derived.inputs[0].shape
    assert contract.inputs[0].dtypes == ["float32", "float16", "bfloat16"]
    assert derived.provenance.source == "derived"


def test_composite_reference_is_derived() -> None:
    program = load_reference(DATA / "lib_composite_reference.py")
    ops = record_ops(program)
    assert ops == ["aten::mm", "aten::relu", "aten::sum"]
    assert match_entry(ops) is None and has_reduction(ops)
    contract = contract_for(program)
    assert contract.provenance.source == "derived"
    assert contract.postcondition.error_model.name == "ensemble"


def test_matmul_and_elementwise_references_match() -> None:
    matmul = contract_for(load_reference(DATA / "prc_matmul_reference.py"))
    assert matmul.postcondition.error_model.params["entry"] == "matmul"
    relu = contract_for(load_reference(DATA / "lib_relu_reference.py"))
    assert relu.postcondition.error_model.name == "elementwise"
    assert Layout.EXPANDED in relu.inputs[0].layouts


def test_models_match_by_their_ops() -> None:
    cases = {
        "linear": (torch.nn.Linear(8, 4), torch.randn(3, 8)),
        "layer_norm": (torch.nn.LayerNorm(8), torch.randn(3, 8)),
        "gelu": (torch.nn.GELU(), torch.randn(3, 8)),
    }
    from kernelgate.contract.match import OpRecorder

    for name, (model, x) in cases.items():
        with torch.no_grad(), OpRecorder() as recorder:
            model(x)
        found = match_entry(recorder.ops)
        assert found is not None and found.name == name, (name, recorder.ops)


def test_rms_norm_written_out_matches() -> None:
    from kernelgate.contract.match import OpRecorder

    x = torch.randn(4, 16)
    with torch.no_grad(), OpRecorder() as recorder:
        x / torch.sqrt(torch.mean(x**2, dim=1, keepdim=True) + 1e-5)
    found = match_entry(recorder.ops)
    assert found is not None and found.name == "rms_norm"
