"""The oracle and the ensemble error model: honest noise passes, real errors fail."""

from __future__ import annotations

import pytest
import torch

from kernelgate.errors import ReferenceError_
from kernelgate.formats.kernelbench import load_reference
from kernelgate.oracle.compare import ValueClass, bitwise_mismatches, value_classes
from kernelgate.oracle.error_models import SAFETY, assess_ensemble, unit_roundoff
from kernelgate.oracle.fp64 import Oracle, repeats

from .conftest import SOFTMAX


def test_oracle_is_float64_on_the_exact_values() -> None:
    oracle = Oracle(load_reference(SOFTMAX / "reference.py"))
    x = torch.randn(30, 1000)
    (expected,) = oracle.expected([x])
    assert expected.dtype == torch.float64
    assert torch.equal(expected, torch.softmax(x.double(), dim=1))


def test_ensemble_bound_separates_noise_from_defects() -> None:
    x = torch.randn(64, 257, dtype=torch.float64)
    ref = torch.softmax(x, dim=1)
    honest = torch.softmax(x.float(), dim=1)
    other_order = torch.exp(x.float() - x.float().amax(1, keepdim=True)) / torch.exp(
        x.float() - x.float().amax(1, keepdim=True)
    ).sum(1, keepdim=True)
    assert assess_ensemble(ref, other_order, {"eager": honest}).passed
    off_by_one_ulp_x100 = honest * (1 + 100 * SAFETY.ensemble * unit_roundoff(torch.float32))
    assessment = assess_ensemble(ref, off_by_one_ulp_x100, {"eager": honest})
    assert not assessment.passed and assessment.mismatches
    assert assessment.params["safety"] == SAFETY.ensemble


def test_nan_where_oracle_is_finite_is_infinite_error() -> None:
    ref = torch.ones(4, dtype=torch.float64)
    got = torch.tensor([1.0, float("nan"), 1.0, 1.0])
    assessment = assess_ensemble(ref, got, {"eager": got.clone().fill_(1.0)})
    assert assessment.worst_ratio == float("inf")
    assert assessment.mismatches[0]["output_position"] == [1]


def test_value_classes_and_bitwise() -> None:
    t = torch.tensor([0.0, float("nan"), float("inf"), -float("inf")])
    assert value_classes(t).tolist() == [
        ValueClass.FINITE,
        ValueClass.NAN,
        ValueClass.POS_INF,
        ValueClass.NEG_INF,
    ]
    assert bitwise_mismatches(torch.tensor([0.0]), torch.tensor([-0.0])) == [(0,)]
    assert bitwise_mismatches(t, t.clone()) == []


def test_an_assessment_moves_to_the_cpu_when_the_device_is_full(monkeypatch) -> None:
    """The judges of an audit share one GPU: an assessment that finds it full runs on the
    CPU instead, says so, and reaches the same verdict."""
    from kernelgate.contract.derive import contract_for
    from kernelgate.gates.base import GateContext

    program = load_reference(SOFTMAX / "reference.py")
    oracle = Oracle(program)
    ctx = GateContext(
        contract=contract_for(program), oracle=oracle, session=None, seed=0, replay=[]
    )
    case = ctx.drawn_case("normal", 1)
    actual = ctx.expected(case)[0].float()  # the exact result, rounded: passes
    ctx.native(case)
    ctx.magnitude(case)  # oracle results cached, so only the assessment sees the "device"
    monkeypatch.setattr(oracle, "device", torch.device("meta"))
    tried: list[str] = []
    assess_on = GateContext._assess_on

    def full_device(self, device, *args):
        tried.append(device.type)
        if device.type == "meta":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return assess_on(self, device, *args)

    monkeypatch.setattr(GateContext, "_assess_on", full_device)
    assessment = ctx.assess(case, 0, actual)
    assert tried == ["meta", "cpu"]
    assert assessment.passed and assessment.params["judged_on"].startswith("cpu")


STATEFUL_REFERENCE = '''
import torch

class Model(torch.nn.Module):
    """State the way CUDA-L1's references keep it: a hidden state as a plain tensor
    attribute (the LSTM problems) and a closure over a submodule (minGPT's block)."""

    def __init__(self, features):
        super().__init__()
        self.rnn = torch.nn.GRU(features, features, batch_first=True)
        self.h0 = torch.randn(1, 2, features)
        self.mlp = torch.nn.Linear(features, features)
        mlp = self.mlp
        self.mlpf = lambda x: mlp(x)

    def forward(self, x):
        self.h0 = self.h0.to(x.device)
        out, _ = self.rnn(x, self.h0)
        return self.mlpf(out)

def get_inputs():
    return [torch.randn(2, 5, 8)]

def get_init_inputs():
    return [8]
'''


def test_oracle_is_float64_through_plain_tensor_state_and_closures(tmp_path) -> None:
    """A deep copy cast with ``Module.to`` leaves ``h0`` and the closure's Linear in float32:
    torch refuses the mixed GRU, and the closure would run the float32 weights."""
    path = tmp_path / "reference.py"
    path.write_text(STATEFUL_REFERENCE)
    oracle = Oracle(load_reference(path))
    x = torch.randn(2, 5, 8)
    (expected,) = oracle.expected([x])
    assert expected.dtype == torch.float64
    model = oracle.model.double()  # the native model, cast by hand the thorough way
    model.h0 = model.h0.double()
    with torch.no_grad():
        assert torch.equal(expected, model(x.double()))
    assert oracle.on_cpu([x], torch.float32)[0].dtype == torch.float32


def _conv_bn_module(name: str, forward: str) -> str:
    """A conv + BatchNorm module source named ``name`` with the given forward body."""
    return (
        f"import torch\n\nclass {name}(torch.nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.conv = torch.nn.Conv2d(3, 4, 3)\n"
        f"        self.bn = torch.nn.BatchNorm2d(4)\n\n    def forward(self, x):\n{forward}"
    )


BATCHNORM_REFERENCE = _conv_bn_module(
    "Model", "        return torch.relu(self.bn(self.conv(x)))\n"
) + (
    "\ndef get_inputs():\n    return [torch.randn(2, 3, 8, 8)]\n\n"
    "def get_init_inputs():\n    return []\n"
)

# What CUDA-L1's accepted BatchNorm candidates do: fold BatchNorm into the convolution with
# the running statistics (inference), where the reference, built as KernelBench builds it,
# is in training mode and normalizes with the batch's statistics.
FOLDED_CANDIDATE = _conv_bn_module(
    "ModelNew",
    "        scale = self.bn.weight / torch.sqrt(self.bn.running_var + self.bn.eps)\n"
    "        shift = self.bn.bias - self.bn.running_mean * scale\n"
    "        return torch.relu(self.conv(x) * scale[:, None, None] + shift[:, None, None])\n",
)

HONEST_CANDIDATE = BATCHNORM_REFERENCE.replace("class Model(", "class ModelNew(")


def _write(folder, name: str, text: str):
    path = folder / name
    path.write_text(text)
    return path


def test_the_oracle_runs_the_reference_in_the_mode_kernelbench_builds_it(tmp_path) -> None:
    """Training mode: BatchNorm with the batch's statistics, as the harness runs it."""
    oracle = Oracle(load_reference(_write(tmp_path, "reference.py", BATCHNORM_REFERENCE)))
    x = torch.randn(2, 3, 8, 8)
    (expected,) = oracle.expected([x])
    y = torch.nn.functional.conv2d(
        x.double(), oracle.model.conv.weight.double(), oracle.model.conv.bias.double()
    )
    mean, var = (
        y.mean(dim=(0, 2, 3), keepdim=True),
        y.var(dim=(0, 2, 3), unbiased=False, keepdim=True),
    )
    batch_stats = torch.relu((y - mean) / torch.sqrt(var + 1e-5))  # weight 1, bias 0
    assert torch.allclose(expected, batch_stats, rtol=0, atol=1e-12)


def test_a_candidate_folding_batchnorm_with_running_statistics_is_rejected(tmp_path) -> None:
    from kernelgate.pipeline import verify

    reference = _write(tmp_path, "reference.py", BATCHNORM_REFERENCE)
    folded = verify(reference, _write(tmp_path, "folded.py", FOLDED_CANDIDATE), only=["CMP-01"])
    assert folded.gate("CMP-01").status.value == "fail"
    honest = verify(reference, _write(tmp_path, "honest.py", HONEST_CANDIDATE), only=["CMP-01"])
    assert honest.gate("CMP-01").status.value == "pass"


@pytest.mark.parametrize(
    ("layer", "forward"),
    [
        ("self.drop = torch.nn.Dropout(0.5)", "return self.drop(x)"),
        ("self.h = torch.zeros(4, 8)", "self.h = torch.tanh(x + self.h)\n        return self.h"),
    ],
    ids=["active-dropout", "state-carried-between-calls"],
)
def test_a_reference_that_is_not_a_function_of_its_inputs_is_refused(
    tmp_path, layer: str, forward: str
) -> None:
    source = (
        "import torch\n\nclass Model(torch.nn.Module):\n    def __init__(self):\n"
        f"        super().__init__()\n        {layer}\n\n    def forward(self, x):\n"
        f"        {forward}\n\ndef get_inputs():\n    return [torch.randn(4, 8)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    oracle = Oracle(load_reference(_write(tmp_path, "reference.py", source)))
    with pytest.raises(ReferenceError_, match="different results for the same inputs"):
        oracle.expected([torch.randn(4, 8)])


@pytest.mark.parametrize("where", [0, 500, 999])  # first, a middle and the partial last chunk
def test_the_repeat_comparison_sees_a_difference_in_any_chunk(where: int) -> None:
    """Chunked so that a 1 G-element output fits beside other judges; a chunk boundary must
    not hide a difference (last chunk partial here: 1,000 elements in chunks of 64)."""
    a = torch.randn(10, 100, dtype=torch.float64)
    assert repeats(a, a.clone(), chunk=64)
    reordered = a * (1 + 1e-12)  # what float64 reordering can change: far below float32's u
    assert repeats(a, reordered, chunk=64)
    moved, nan_there = a.clone(), a.clone()
    moved.view(-1)[where] += 1e-3 * a.abs().max()
    nan_there.view(-1)[where] = float("nan")
    assert not repeats(a, moved, chunk=64)
    assert not repeats(a, nan_there, chunk=64)
    assert repeats(nan_there, nan_there.clone(), chunk=64)  # NaN where both have it is alike


def test_a_reference_that_writes_into_its_input_is_still_an_oracle(tmp_path) -> None:
    source = (
        "import torch\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
        "        return x.mul_(2.0).relu_()\n\n"
        "def get_inputs():\n    return [torch.randn(4, 8)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    oracle = Oracle(load_reference(_write(tmp_path, "reference.py", source)))
    x = torch.randn(4, 8)
    (expected,) = oracle.expected([x])
    assert torch.equal(expected, (x.double() * 2).relu())


MASKED_ROW_SUM = '''
import torch

class Model(torch.nn.Module):
    """A causal row sum computed densely: the entries above the diagonal are multiplied by 0,
    so a NaN there makes the oracle's row NaN although the row does not depend on it."""

    def forward(self, x):
        keep = torch.ones(x.shape[-1], x.shape[-1], dtype=x.dtype, device=x.device).tril()
        return (x.unsqueeze(-2) * keep).sum(-1)

def get_inputs():
    return [torch.randn(4, 6)]

def get_init_inputs():
    return []
'''


def _oracle_context(tmp_path, source: str):
    """A judge's context for the reference ``source`` with no candidate (oracle probes only)."""
    from kernelgate.contract.derive import contract_for
    from kernelgate.gates.base import GateContext

    path = tmp_path / "reference.py"
    path.write_text(source)
    program = load_reference(path)
    return GateContext(
        contract=contract_for(program), oracle=Oracle(program), session=None, seed=0, replay=[]
    )


def test_the_dependence_probe_excuses_only_positions_no_special_reaches(tmp_path) -> None:
    """EXC-01's probe: the oracle again with the specials made finite three ways; a position
    whose result is the same all three ways does not depend on them (0 x NaN above a causal
    diagonal), one that changes does, and a case without specials has no probe."""
    ctx = _oracle_context(tmp_path, MASKED_ROW_SUM)
    case = ctx.drawn_case("normal", 1)
    assert ctx.dependence_probe(case) is None
    x = case.values[0].clone()
    x[0, 5] = float("nan")  # only out[0, :5] multiply it by 0; out[0, 5] adds it
    case.values = [x]
    oracle = ctx.expected(case)[0]
    probe = ctx.dependence_probe(case)[0]
    assert oracle[0].isnan().all()  # the dense reference: every position of row 0 is NaN
    assert torch.isfinite(probe[0, :5]).all() and probe[0, 5].isnan()
    torch.testing.assert_close(probe[1:], oracle[1:], rtol=0, atol=0)
    dense_free = (x[0, :5].double().unsqueeze(0) * torch.ones(5, 5).tril().double()).sum(-1)
    torch.testing.assert_close(probe[0, :5], dense_free, rtol=0, atol=0)


def test_the_refined_dependence_probe_keeps_only_the_specials_a_position_depends_on(
    tmp_path,
) -> None:
    """A row that sees a special (an Inf it adds) and also multiplies a masked one by 0 (a
    NaN past the diagonal): the dense oracle makes the whole row NaN, the coarse probe can
    excuse only the position that sees neither, and the refined probe gives each position
    the value with only the specials it depends on: +inf before the NaN, NaN from it on."""
    ctx = _oracle_context(tmp_path, MASKED_ROW_SUM)
    case = ctx.drawn_case("normal", 1)
    x = case.values[0].clone()
    x[0, 1], x[0, 5] = float("inf"), float("nan")
    case.values = [x]
    oracle = ctx.expected(case)[0]
    assert oracle[0].isnan().all()
    coarse = ctx.dependence_probe(case)[0]
    assert torch.isfinite(coarse[0, 0]) and coarse[0, 1:].isnan().all()
    disputed = torch.zeros_like(oracle, dtype=torch.bool)
    disputed[0, 1:] = True
    refined = ctx.refined_dependence_probe(case, 0, disputed)[0]
    assert refined[0, 0] == coarse[0, 0]  # not disputed: the coarse value stays
    assert (refined[0, 1:5] == float("inf")).all() and refined[0, 5].isnan()
    torch.testing.assert_close(refined[1:], oracle[1:], rtol=0, atol=0)


ADDITIVE_MASK_ATTENTION = '''
import torch

class Model(torch.nn.Module):
    """Causal attention computed densely with the mask *added* (as SDPA's math path does on
    some devices), a row whose scores are all -inf weighted 0 (SDPA's convention): a masked
    score of +inf * k + (-inf) is NaN or -inf by the masked key's sign."""

    def forward(self, q, k, v):
        n = q.shape[-2]
        bias = torch.full((n, n), float("-inf"), dtype=q.dtype, device=q.device).triu(1)
        scores = q @ k.transpose(-1, -2) + bias
        empty = (scores == float("-inf")).all(dim=-1, keepdim=True)
        return torch.where(empty, 0.0, torch.softmax(scores, dim=-1)) @ v

def get_inputs():
    return [torch.randn(5, 4) for _ in range(3)]

def get_init_inputs():
    return []
'''


def test_the_completion_probe_excuses_a_class_made_through_masked_finite_entries(
    tmp_path,
) -> None:
    """A +inf in query 1, whose visible scores all go to -inf: the dense oracle's row is NaN
    because a masked key's score is +inf + (-inf), which a kernel that skips masked keys
    never computes. The position depends on query 1 and keys 0-1 only; with the masked keys
    made negative the oracle's row is no longer NaN, so its class is not forced by the case.
    A position whose NaN comes from what it depends on stays NaN in both completions."""
    ctx = _oracle_context(tmp_path, ADDITIVE_MASK_ATTENTION)
    case = ctx.drawn_case("normal", 3)
    q, k, v = (x.clone() for x in case.values)
    q[1, 0] = float("inf")
    k[:2, 0] = -k[:2, 0].abs() - 0.5  # both visible scores of row 1 are -inf
    k[2:, 0] = k[2:, 0].abs() + 0.5  # masked keys positive: +inf + (-inf) = NaN
    v[3, 2] = float("nan")  # row 3 (and 4) see it: a NaN they depend on
    case.values = [q, k, v]
    oracle = ctx.expected(case)[0]
    assert oracle[1].isnan().all() and oracle[3, 2].isnan()
    disputed = torch.zeros_like(oracle, dtype=torch.bool)
    disputed[1], disputed[3, 2] = True, True
    positive, negative = ctx.completion_probes(case, 0, disputed, ctx.expected(case))
    assert positive[0][1].isnan().all()  # positive masked keys: the case's own NaN
    assert not negative[0][1].isnan().any()  # negative masked keys: absorbed by the mask
    assert positive[0][3, 2].isnan() and negative[0][3, 2].isnan()  # forced
    undisputed = ~disputed
    torch.testing.assert_close(negative[0][undisputed], oracle[undisputed], equal_nan=True)
