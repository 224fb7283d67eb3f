"""The family's backward examples (examples/<member>_backward/ for DeltaNet, GLA, KDA and
Mamba-2 SSD): each candidate's gradients against its reference's float64 autograd, the
defects wrong where they say and rejected by CMP-01, and (GPU) the twelve gates.

One table row a member, as PyTorch's OpInfo entries: what differs between the examples
(their dims, gradients, sizes and defects) is data; the checks are the same. The Gated
DeltaNet example has its own file (test_gdn_backward_example.py): it also judges the
register-resident candidate and the device's TF32 rounding.

Without CUDA the kernels run under the Triton interpreter (fp32 only is meaningful there;
16-bit inputs run the fp32 kernels on fp32 copies). A full CPU verify of an example takes
minutes, so it is not run here: its evidence is committed (benchmarks/results/
<member>-bwd-verify-cpu.json) and each example's README gives the command.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

from ._example import (
    assert_gradients_match,
    assert_verified_on_gpu,
    evidence_folder,
    load,
    resized_contract,
    verify,
)
from ._measure import ensemble_ratio, rel_err

ROOT = Path(__file__).resolve().parents[2]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
FP32_TOL = 1e-5  # relative error of every fp32 gradient against the float64 oracle
WRONG = 1e-2  # a defect's gradient is wrong when its relative error is above this
EVIDENCE_ENV = "KERNELGATE_BWD_EVIDENCE"  # where the GPU verifies leave their evidence
STANDARD_DIMS = ("batch_size", "seq_len", "num_heads", "head_dim_k", "head_dim_v")
TINY = {"batch_size": 1, "seq_len": 20, "num_heads": 1, "head_dim_k": 16, "head_dim_v": 16}


@dataclass(frozen=True)
class BackwardExample:
    """One member's backward example, as the tests need it."""

    member: str  # examples/<member>_backward
    grads: tuple[str, ...]  # the candidate's outputs, in order
    grad_of: tuple[int, ...]  # the reference input each gradient matches (dtype, shape)
    sizes: tuple[tuple[int, ...], ...]  # cases for the gradient check, in ``dims`` order
    defects: dict[str, tuple[str, ...]]  # defect file -> the gradients it gets wrong
    dims: tuple[str, ...] = STANDARD_DIMS
    tiny: dict[str, int] = field(default_factory=lambda: dict(TINY))  # CMP-01's contract
    # Gradients a defect leaves too close to right to call either way (see the row).
    unjudged: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        return ROOT / "examples" / f"{self.member}_backward"

    def reference(self, name: str = "reference.py"):
        return load(self.folder / name, f"{self.member}_bwd_{Path(name).stem}")

    def candidate(self, name: str = "candidate.py"):
        return load(self.folder / name, f"{self.member}_bwd_{Path(name).stem}").ModelNew()

    def inputs(self, sizes: dict[str, int], seed: int) -> list[torch.Tensor]:
        """The reference's input distribution at ``sizes`` (float32), drawn on the CPU and
        moved to the GPU when there is one (the compiled kernels need CUDA tensors)."""
        reference = self.reference()
        for name, value in sizes.items():
            setattr(reference, name, value)
        torch.manual_seed(seed)
        return [x.to(DEVICE) for x in reference.get_inputs()]


EXAMPLES = [
    # Two 64-step chunks (the second ragged) at the example's size; odd widths (K, V
    # zero-padded around the kernels). Without decay nothing fades dht's share, so dropping
    # it spoils dh0 as well; q never reaches the final state.
    BackwardExample(
        member="delta_rule",
        grads=("dq", "dk", "dv", "dbeta", "dh0"),
        grad_of=(0, 1, 2, 3, 5),
        sizes=((2, 70, 2, 32, 32), (1, 17, 2, 13, 7)),
        defects={
            "defect_ignores_dht.py": ("dk", "dv", "dbeta", "dh0"),
            "defect_dbeta_dropped.py": ("dbeta",),
        },
    ),
    # Four 16-step chunks and a ragged fifth; odd widths (masked tiles). dht reaches dh0
    # only through the product of every step's decay, which can leave its share below fp32
    # noise: dh0 is not judged for the dht defect.
    BackwardExample(
        member="gla",
        grads=("dq", "dk", "dv", "dg", "dh0"),
        grad_of=(0, 1, 2, 3, 5),
        sizes=((2, 70, 2, 32, 32), (1, 17, 2, 13, 7)),
        defects={
            "defect_ignores_dht.py": ("dk", "dv", "dg"),
            "defect_dg_dropped.py": ("dg",),
        },
        unjudged={"defect_ignores_dht.py": ("dh0",)},
    ),
    # Three 16-step chunks (the last ragged); odd K, V with a ragged second chunk. dh0 as in
    # GLA (per-channel decays).
    BackwardExample(
        member="kda",
        grads=("dq", "dk", "dv", "dg", "dbeta", "dh0"),
        grad_of=(0, 1, 2, 3, 4, 6),
        sizes=((2, 40, 2, 32, 32), (1, 17, 1, 20, 24)),
        defects={
            "defect_ignores_dht.py": ("dk", "dv", "dg", "dbeta"),
            "defect_dg_scalar.py": ("dg",),
        },
        unjudged={"defect_ignores_dht.py": ("dh0",)},
    ),
    # Heads as [groups, heads per group]; odd N, P with three heads per group and one ragged
    # chunk. C and D never meet the state, so dropping dht leaves dC and dD right; two heads
    # share a group's B and C in the tiny contract, as the group defect needs.
    BackwardExample(
        member="mamba2",
        grads=("dx", "ddt", "dA", "dB", "dC", "dD", "dh0"),
        grad_of=(0, 1, 2, 3, 4, 5, 7),
        dims=("batch_size", "seq_len", "num_groups", "heads_per_group", "state_dim", "head_dim"),
        sizes=((2, 70, 2, 2, 32, 32), (1, 17, 1, 3, 20, 24)),
        defects={
            "defect_ignores_dht.py": ("dx", "ddt", "dA", "dB", "dh0"),
            "defect_group_grads_one_head.py": ("dB", "dC"),
        },
        tiny={
            "batch_size": 1,
            "seq_len": 20,
            "num_groups": 1,
            "heads_per_group": 2,
            "state_dim": 16,
            "head_dim": 16,
        },
    ),
]
BY_MEMBER = {example.member: example for example in EXAMPLES}
SIZE_CASES = [
    pytest.param(example, shape, id=f"{example.member}-" + "x".join(map(str, shape)))
    for example in EXAMPLES
    for shape in example.sizes
]
DEFECT_CASES = [
    pytest.param(example, defect, id=f"{example.member}-{Path(defect).stem}")
    for example in EXAMPLES
    for defect in example.defects
]
MEMBERS = pytest.mark.parametrize("member", list(BY_MEMBER))


@pytest.mark.parametrize("example, shape", SIZE_CASES)
def test_candidate_gradients_match_float64_reference(example: BackwardExample, shape):
    """Every gradient of the candidate (fp32 kernels) within 1e-5 relative error of the
    reference's float64 autograd, on the same input values; the candidate leaves its inputs
    untouched and returns fresh tensors of the inputs' dtypes and shapes."""
    assert_gradients_match(
        example.reference().Model(),
        example.candidate(),
        example.inputs(dict(zip(example.dims, shape, strict=True)), seed=sum(shape)),
        example.grads,
        example.grad_of,
        FP32_TOL,
    )


@MEMBERS
def test_bf16_gradients_within_the_ensemble_bound(member: str):
    """reference_bf16's inputs (16-bit activations; decays, gates and states fp32): each
    gradient in its input's dtype, and every one within CMP-01's ensemble bound (16 x (the
    honest run's worst error + 2 u |ref|), the honest run being reference_bf16 natively, in
    fp32). The fp32 gradients are the ones a TF32-dot path would break (docs/kernels/)."""
    example = BY_MEMBER[member]
    reference = example.reference("reference_bf16.py")
    torch.manual_seed(0)
    inputs = [x.to(DEVICE) for x in reference.get_inputs()]
    with torch.no_grad():
        exact = reference.Model()(*[x.double() for x in inputs])
        honest = reference.Model()(*inputs)
        got = example.candidate()(*inputs)
    assert any(x.dtype == torch.bfloat16 for x in inputs)
    ratios = {}
    for name, ours, ref, fair, like in zip(
        example.grads, got, exact, honest, example.grad_of, strict=True
    ):
        assert ours.dtype == fair.dtype == inputs[like].dtype, name
        ratios[name] = ensemble_ratio(ours, ref, fair)
    assert all(r <= 1.0 for r in ratios.values()), ratios


@pytest.mark.parametrize("example, defect", DEFECT_CASES)
def test_defects_are_wrong_where_they_say(example: BackwardExample, defect: str):
    """Each defect, on the tiny contract's inputs, is wrong in the gradients it names and
    matches the reference elsewhere as the honest candidate does: so CMP-01's rejection
    below is the defect's, not an artefact of the tiny contract."""
    inputs = example.inputs(example.tiny, seed=3)
    with torch.no_grad():
        expected = example.reference().Model()(*[x.double() for x in inputs])
        got = example.candidate(defect)(*inputs)
    errors = {n: rel_err(o, r) for n, o, r in zip(example.grads, got, expected, strict=True)}
    wrong, unjudged = example.defects[defect], example.unjudged.get(defect, ())
    for name, error in errors.items():
        if name in wrong:
            assert error > WRONG, (name, errors)
        elif name not in unjudged:
            assert error <= FP32_TOL, (name, errors)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CPU mode: the interpreter's tiny run")
@MEMBERS
def test_defective_backward_rejected_by_cmp01(member: str, tmp_path: Path):
    """A backward that drops dht's contribution fails ``kernelgate verify --only CMP-01`` on
    the tiny contract, with a counterexample (one verify process a member, 25-50 s on two
    shared cores; the honest candidate's CMP-01 pass is in the committed full CPU verify)."""
    example = BY_MEMBER[member]
    contract = resized_contract(
        example.folder / "contract.toml", example.tiny, tmp_path / "contract.toml"
    )
    evidence, log = verify(
        str(example.folder / "reference.py"),
        str(example.folder / "defect_ignores_dht.py"),
        "--contract",
        str(contract),
        "--only",
        "CMP-01",
        str(tmp_path / "defect.json"),
        timeout=600,
    )
    gate = next(g for g in evidence["gates"] if g["id"] == "CMP-01")
    assert gate["status"] == "fail", (gate["reason"], log[-2000:])
    assert evidence["verdict"] == "rejected"
    assert gate["counterexample"] is not None


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@MEMBERS
@pytest.mark.parametrize(
    "reference, contract, label",
    [
        ("reference.py", "contract.toml", "fp32"),
        ("reference_bf16.py", "contract_bf16.toml", "bf16"),
    ],
    ids=["fp32", "bf16"],
)
def test_backward_example_verified_on_gpu(member, reference, contract, label, tmp_path):
    """The twelve gates on the device, fp32 and bf16: verified. The evidence goes to the
    folder named by KERNELGATE_BWD_EVIDENCE (else a temporary one), as
    <member>-bwd-verify-<label>-h200.json."""
    example = BY_MEMBER[member]
    assert_verified_on_gpu(
        example.folder / reference,
        example.folder / "candidate.py",
        example.folder / contract,
        evidence_folder((EVIDENCE_ENV,), tmp_path) / f"{member}-bwd-verify-{label}-h200.json",
    )
