"""Runtime dispatch (issue 23, part 3): the candidate answers only inside its verified domain.

The property test draws contracts and inputs (shapes, dtypes, layouts, alignment) and
compares the compiled guard with a slow reading of the domain written independently here:
it enumerates every element's address instead of reasoning about strides.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernelgate
from kernelgate.contract.derive import contract_for
from kernelgate.contract.spec import (
    Contract,
    Dim,
    IntegerDomain,
    IntegerStructure,
    Layout,
    OutputSpec,
    Postcondition,
    ScalarSpec,
    TensorSpec,
    ValueDomain,
)
from kernelgate.dispatch import CompiledDomain, DispatchError, DispatchWarning, guarded
from kernelgate.formats.kernelbench import load_reference

from .conftest import SOFTMAX

REFERENCE = SOFTMAX / "reference.py"
HONEST = SOFTMAX / "honest.py"
DTYPE_POOL = (torch.float32, torch.float16, torch.bfloat16, torch.float64)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_text().encode()).hexdigest()


@pytest.fixture(scope="module")
def softmax_contract() -> Contract:
    return contract_for(load_reference(REFERENCE))


def evidence_for(contract: Contract, verdict: str = "verified", **extra: Any) -> dict[str, Any]:
    """A verdict's JSON as the judge writes it, for the softmax pair, with ``contract``."""
    return {
        "schema": "kernelgate.verdict/2",
        "verdict": verdict,
        "reference": str(REFERENCE),
        "candidate": str(HONEST),
        "reference_sha256": sha256(REFERENCE),
        "candidate_sha256": sha256(HONEST),
        "contract": contract.to_dict(),
        "environment": {"device": "cpu"},
        "skipped": ["RES-02: needs a device"],
        "failed_gates": [],
        "failed_rules": [],
        "verified_domain": None,
        **extra,
    }


def quiet_guard(*args: Any, **kwargs: Any):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DispatchWarning)  # a clean evidence warns of nothing
        return guarded(*args, **kwargs)


# --- the slow, independent reading of the domain -------------------------------------------


def addresses(value: torch.Tensor) -> list[int]:
    """Every element's offset into its storage, in logical (row-major) order."""
    span = value.untyped_storage().nbytes() // value.element_size()
    index = torch.arange(span, dtype=torch.int64)
    placed = torch.as_strided(index, value.shape, value.stride(), value.storage_offset())
    return placed.reshape(-1).tolist()


def layouts_needed(value: torch.Tensor) -> set[str] | None:
    """Which layout kinds a view shows, read from its addresses; None if two elements share
    one without a zero stride explaining it (an overlap no layout admits)."""
    needed: set[str] = set()
    single = value
    for axis, size in enumerate(value.shape):
        if size > 1 and value.stride(axis) == 0:
            needed.add("expanded")
            single = single.narrow(axis, 0, 1)
    where = addresses(single)
    if len(set(where)) != len(where):
        return None
    if any(b <= a for a, b in itertools.pairwise(where)):
        needed.add("transposed")
    if where and max(where) - min(where) + 1 != len(where):
        needed.add("strided")
    return needed


def slow_admits(contract: Contract, args: list[Any]) -> bool:
    """The contract's domain, read from the spec for this one call."""
    if len(args) != len(contract.inputs):
        return False
    bound: dict[str, int] = {}
    for spec, value in zip(contract.inputs, args):
        if isinstance(spec, ScalarSpec):
            if value != spec.value:
                return False
            continue
        if not isinstance(value, torch.Tensor) or value.device.type != "cpu":
            return False
        if str(value.dtype).removeprefix("torch.") not in spec.dtypes:
            return False
        if value.requires_grad and torch.is_grad_enabled():
            return False
        if value.dim() != len(spec.shape):
            return False
        for size, want in zip(value.shape, spec.shape):
            if isinstance(want, int):
                if size != want:
                    return False
            elif bound.setdefault(want, size) != size or not contract.dim(want).admits(size):
                return False
        needed = layouts_needed(value) if value.numel() else set()
        admitted = {lay.value for lay in spec.layouts}
        if needed is None or not needed <= admitted:
            return False
        if value.data_ptr() % 16 and "offset" not in admitted:
            return False
    tensors = [(s, v) for s, v in zip(contract.inputs, args) if isinstance(s, TensorSpec)]
    for i, (spec_a, a) in enumerate(tensors):
        for spec_b, b in tensors[i + 1 :]:
            if not (spec_a.may_alias and spec_b.may_alias) and bytes_of(a) & bytes_of(b):
                return False
    return True


def bytes_of(value: torch.Tensor) -> set[int]:
    """Every byte address the view's elements occupy."""
    base, size = value.untyped_storage().data_ptr(), value.element_size()
    return {base + a * size + k for a in addresses(value) for k in range(size)}


# --- drawn contracts and inputs -------------------------------------------------------------


@st.composite
def domains(draw: st.DrawFn) -> Contract:
    """A one- or two-input contract over dims M, N with drawn bounds, dtypes and layouts."""
    dims = []
    for name in ("M", "N"):
        low = draw(st.integers(1, 4))
        high = draw(st.one_of(st.none(), st.integers(low, 9)))
        dims.append(
            Dim(name, reference=low, min=low, max=high, multiple_of=draw(st.sampled_from([1, 2])))
        )
    optional = [Layout.OFFSET, Layout.STRIDED, Layout.TRANSPOSED, Layout.EXPANDED]
    inputs = []
    for index in range(draw(st.integers(1, 2))):
        chosen = draw(st.lists(st.sampled_from(optional), unique=True))
        dtypes = draw(st.lists(st.sampled_from(DTYPE_POOL[:3]), min_size=1, unique=True))
        inputs.append(
            TensorSpec(
                name=f"arg{index}",
                shape=["M", "N"] if index == 0 else ["N"],
                dtypes=[str(d).removeprefix("torch.") for d in dtypes],
                layouts=[Layout.CONTIGUOUS, *chosen],
            )
        )
    return Contract(
        name="drawn",
        dims=dims,
        inputs=inputs,
        outputs=[OutputSpec("out0", ["M", "N"], "float32")],
        postcondition=Postcondition(reference="drawn"),
    )


@st.composite
def views(draw: st.DrawFn, contract: Contract, spec: TensorSpec) -> torch.Tensor:
    """A tensor for ``spec`` in a drawn layout: a slice, a transpose, a broadcast, a
    misaligned start, or arbitrary (possibly overlapping) strides. Dtype and sizes are
    mostly drawn from what the contract admits, so that the layouts decide the route."""
    admitted = [getattr(torch, name) for name in spec.dtypes]
    dtype = draw(st.one_of(st.sampled_from(admitted), st.sampled_from(DTYPE_POOL)))
    ndim = len(spec.shape)
    shape = []
    for name in spec.shape:
        dim = contract.dim(name)
        fitting = [n for n in range(1, 10) if dim.admits(n)]
        anything = st.integers(1, 9)
        shape.append(draw(st.one_of(st.sampled_from(fitting), anything) if fitting else anything))
    kind = draw(
        st.sampled_from(["contiguous", "offset", "strided", "transposed", "expanded", "raw"])
    )
    shift = draw(st.integers(0, 3)) if kind in ("offset", "raw") else 0
    storage = torch.zeros(4 * (max(shape) + 2) ** ndim + 64, dtype=dtype)
    if kind == "raw":
        stride = draw(st.lists(st.integers(0, 12), min_size=ndim, max_size=ndim))
        return torch.as_strided(storage, shape, stride, shift)
    if kind == "strided":
        step = draw(st.integers(2, 3))
        big = storage[: step * torch.Size(shape).numel() + 8].view(-1)
        return big[: step * torch.Size(shape).numel() : step].view(shape)
    if kind == "transposed" and ndim == 2:
        return storage[: shape[0] * shape[1]].view(shape[1], shape[0]).t()
    if kind == "expanded":
        return storage[: shape[-1]].view(*([1] * (ndim - 1)), shape[-1]).expand(shape)
    return storage[shift : shift + torch.Size(shape).numel()].view(shape)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contract=domains(), data=st.data())
def test_the_guard_never_routes_outside_the_domain(contract: Contract, data: st.DataObject) -> None:
    domain = CompiledDomain(contract, "cpu")
    args = [data.draw(views(contract, spec)) for spec in contract.inputs]
    if len(args) > 1:
        shared = data.draw(st.sampled_from(["apart", "same sizes", "same storage"]))
        if shared == "same sizes":  # N bound by both: make the sizes agree
            args[1] = args[1].new_zeros(args[0].shape[1])
        elif shared == "same storage":  # a row of the first input, or a slice beside it
            start = data.draw(st.integers(0, 90))
            args[1] = torch.as_strided(args[0], (args[0].shape[1],), (1,), start)
    inside = slow_admits(contract, args)
    why = domain.reason(args)
    assert domain.admits(tuple(args), {}) == (why is None)  # the generated fast path agrees
    if why is None:
        assert inside, f"routed to the candidate outside the domain: {args}"
    elif inside:
        # the guard may refuse a layout only the slow reading can prove disjoint (strides
        # that interleave without overlapping); nothing else inside may go to the reference
        assert "overlapping strides" in why or "share memory" in why, why


def test_layout_needs_reads_each_kind() -> None:
    x = torch.zeros(6, 8)
    domain = CompiledDomain(
        Contract(
            "c",
            [Dim("M", 6), Dim("N", 8)],
            [TensorSpec("x", ["M", "N"], ["float32"], layouts=[Layout.CONTIGUOUS])],
            [],
            Postcondition("r"),
        ),
        "cpu",
    )
    assert domain.reason([x]) is None
    assert "transposed" in domain.reason([torch.zeros(8, 6).t()])
    assert "strided" in domain.reason([torch.zeros(6, 16)[:, ::2]])
    assert "expanded" in domain.reason([torch.zeros(1, 8).expand(6, 8)])
    assert "aligned" in domain.reason([torch.zeros(49)[1:].view(6, 8)])
    assert "overlapping" in domain.reason([torch.as_strided(torch.zeros(20), (6, 8), (1, 1))])
    assert "dims" in domain.reason([torch.zeros(48)])
    assert "dtype" in domain.reason([x.half()])
    assert "keyword" in domain.reason([], {"x": x})


def test_scalars_aliasing_and_values_are_part_of_the_domain() -> None:
    contract = Contract(
        "c",
        [Dim("N", 4, min=1, max=64)],
        [
            TensorSpec("a", ["N"], ["float32"], values=ValueDomain.FINITE),
            TensorSpec(
                "idx", ["N"], ["int64"], domain=IntegerDomain(0, 9, [IntegerStructure.SORTED])
            ),
            ScalarSpec("eps", 1e-5),
        ],
        [],
        Postcondition("r"),
    )
    domain = CompiledDomain(contract, "cpu")
    a, idx = torch.ones(8), torch.arange(8)
    assert domain.reason([a, idx, 1e-5]) is None
    assert "eps" in domain.reason([a, idx, 1e-3])
    assert "NaN" in domain.reason([torch.full((8,), float("nan")), idx, 1e-5])
    assert "above 9" in domain.reason([a, idx + 5, 1e-5])
    assert "sorted" in domain.reason([a, idx.flip(0), 1e-5])
    assert "= 7, but N = 8" in domain.reason([a, idx[:7], 1e-5])
    for args in ([a, idx, 1e-5], [a, idx, 1e-3], [a, idx + 5, 1e-5], [a, idx[:7], 1e-5]):
        assert domain.admits(args, {}) == (domain.reason(args) is None)
    trusting = CompiledDomain(contract, "cpu", trust_values=True)
    assert trusting.reason([torch.full((8,), float("nan")), idx + 5, 1e-5]) is None
    shared = Contract(
        "s",
        [Dim("N", 4)],
        [TensorSpec("a", ["N"], ["float32"]), TensorSpec("b", ["N"], ["float32"])],
        [],
        Postcondition("r"),
    )
    buffer = torch.zeros(12)
    pair = CompiledDomain(shared, "cpu")
    assert "share memory" in pair.reason([buffer[:6], buffer[4:10]])
    assert not pair.admits([buffer[:6], buffer[4:10]], {})
    assert pair.reason([buffer[:6], buffer[6:]]) is None  # one storage, disjoint: no alias


def test_a_verified_guard_calls_the_candidate_inside_and_the_reference_outside(
    softmax_contract: Contract,
) -> None:
    guard = quiet_guard(REFERENCE, HONEST, evidence_for(softmax_contract))
    assert isinstance(guard, torch.nn.Module)
    x = torch.randn(7, 33)
    torch.testing.assert_close(guard(x), torch.softmax(x, 1))
    torch.testing.assert_close(guard(x.t()), torch.softmax(x.t(), 1))  # transposed admitted
    assert guard.routes == {"candidate": 2, "reference": 0}
    torch.testing.assert_close(guard(x.double()), torch.softmax(x.double(), 1))  # not admitted
    guard(torch.randn(2, 3, 4))
    assert guard.routes == {"candidate": 2, "reference": 2}
    assert "requires grad" in guard.why(torch.randn(3, 3, requires_grad=True))
    seen: list[str] = []  # a hook on the guard itself takes nn.Module's own call path
    handle = guard.register_forward_hook(lambda module, args, out: seen.append("hook"))
    guard(x)
    handle.remove()
    guard(x)
    assert seen == ["hook"] and guard.routes == {"candidate": 4, "reference": 2}


def test_a_narrowed_guard_keeps_to_the_sub_domain(softmax_contract: Contract) -> None:
    narrowed = copy.deepcopy(softmax_contract)
    narrowed.inputs[0].layouts = [Layout.CONTIGUOUS, Layout.OFFSET]
    evidence = evidence_for(
        softmax_contract,
        "narrowed",
        failed_gates=["CMP-02"],
        verified_domain={"contract": narrowed.to_dict(), "changes": [], "rests_on": ["CMP-02"]},
    )
    guard = quiet_guard(REFERENCE, HONEST, evidence)
    x = torch.randn(5, 16)
    guard(x)
    guard(x.t())  # the full contract admits it, the narrowed one not
    guard(torch.randn(5, 32)[:, ::2])
    assert guard.routes == {"candidate": 1, "reference": 2}


def test_a_rejected_verdict_always_calls_the_reference_and_says_so(
    softmax_contract: Contract,
) -> None:
    evidence = evidence_for(softmax_contract, "rejected", failed_gates=["EXC-01"])
    modules_before = set(sys.modules)
    with pytest.warns(DispatchWarning, match=r"rejects the candidate \(failed: EXC-01\)"):
        guard = guarded(REFERENCE, HONEST, evidence)
    assert not {m for m in set(sys.modules) - modules_before if "dispatch_" in m}  # not imported
    x = torch.randn(4, 8)
    torch.testing.assert_close(guard(x), torch.softmax(x, 1))
    assert guard.routes == {"candidate": 0, "reference": 1}
    assert "rejected" in guard.why(x)


def test_evidence_for_another_program_is_an_error_that_says_what_to_do(
    softmax_contract: Contract, tmp_path: Path
) -> None:
    edited = tmp_path / "reference.py"
    edited.write_text(REFERENCE.read_text() + "\n# edited\n")
    with pytest.raises(DispatchError, match="made for a reference") as caught:
        guarded(edited, HONEST, evidence_for(softmax_contract))
    assert "kernelgate verify" in str(caught.value) and str(REFERENCE) in str(caught.value)
    other = SOFTMAX / "nan_swallow.py"
    with pytest.raises(DispatchError, match="made for a candidate"):
        guarded(REFERENCE, other, evidence_for(softmax_contract))
    older = evidence_for(softmax_contract)
    del older["reference_sha256"]  # a verdict before the top-level digests: provenance's
    with pytest.raises(DispatchError, match="made for a reference"):
        guarded(edited, HONEST, older)
    with pytest.raises(DispatchError, match="schema"):
        guarded(REFERENCE, HONEST, {**older, "schema": "kernelgate.verdict/99"})


def test_what_the_guard_cannot_vouch_for_is_warned(softmax_contract: Contract) -> None:
    partial = evidence_for(softmax_contract, skipped=["MEM-01: not selected (--only)"])
    with pytest.warns(DispatchWarning, match="partial verification: MEM-01"):
        guarded(REFERENCE, HONEST, partial)
    model = torch.nn.Softmax(dim=1)  # a module from torch's file, not the judged reference
    with pytest.raises(DispatchError, match="made for a reference"):
        guarded(model, HONEST, evidence_for(softmax_contract))
    namespace: dict[str, Any] = {}  # classes with no file behind them: nothing to digest
    exec(
        "import torch\nclass Fileless(torch.nn.Module):\n"
        "    def forward(self, x):\n        return torch.softmax(x, 1)\n",
        namespace,
    )
    fileless = namespace["Fileless"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        guard = guarded(fileless(), fileless(), evidence_for(softmax_contract))
    said = [str(w.message) for w in caught if w.category is DispatchWarning]
    for role in ("reference", "candidate"):
        assert any(f"for this {role} (its source file cannot be found)" in m for m in said)
    guard(torch.randn(2, 5))
    assert guard.routes["candidate"] == 1


def test_verify_records_the_digests_the_guard_checks(tmp_path: Path) -> None:
    verdict = kernelgate.verify(REFERENCE, HONEST, only=["CMP-02"])
    assert verdict.reference_sha256 == sha256(REFERENCE)
    assert verdict.candidate_sha256 == sha256(HONEST)
    evidence = tmp_path / "evidence.json"
    evidence.write_text(verdict.to_json())
    with pytest.warns(DispatchWarning, match="partial verification"):
        guard = guarded(REFERENCE, HONEST, evidence)
    x = torch.randn(3, 40)[:, ::2]
    torch.testing.assert_close(guard(x), torch.softmax(x, 1))
    assert guard.routes["candidate"] == 1


@pytest.mark.gpu
def test_on_the_device_the_guard_keeps_cpu_inputs_on_the_reference(
    softmax_contract: Contract,
) -> None:
    evidence = evidence_for(softmax_contract, environment={"device": "cuda"})
    guard = quiet_guard(REFERENCE, HONEST, evidence, device="cuda")
    x = torch.randn(64, 1000, device="cuda")
    torch.testing.assert_close(guard(x), torch.softmax(x, 1))
    torch.testing.assert_close(guard(x.t()), torch.softmax(x.t(), 1))
    guard(x.cpu())  # the kernel's device is cuda: a CPU tensor goes to the reference
    assert guard.routes == {"candidate": 2, "reference": 1}
    assert "on cpu" in guard.why(x.cpu())
    misaligned = torch.randn(64 * 1000 + 1, device="cuda")[1:].view(64, 1000)
    assert guard.why(misaligned) is None  # the contract admits offset starts
