"""Integer input domains (issue 20, part 2): derived from the reference, drawn inside it.

Indices, page tables and packed values are drawn anew for every case, but only inside the
domain the reference's own seeded ``get_inputs()`` shows, with its structure: a candidate
that would read out of range never sees an out-of-range index, and a permutation stays one.
"""

from __future__ import annotations

import torch

import kernelgate
from kernelgate.contract.derive import derive_contract
from kernelgate.contract.spec import Contract, IntegerDomain, IntegerStructure, TensorSpec
from kernelgate.formats.kernelbench import load_reference
from kernelgate.gates.base import Status
from kernelgate.inputs.integers import derive_domain, draw_in_domain, index_bound

from .conftest import DATA

EMBEDDING = DATA / "dom_embedding_reference.py"
PAGE_TABLE = DATA / "dom_page_table_reference.py"


def _spec(contract: Contract, index: int) -> TensorSpec:
    spec = contract.inputs[index]
    assert isinstance(spec, TensorSpec)
    return spec


def test_an_embedding_index_domain_is_the_table_and_draws_stay_inside_it() -> None:
    contract = derive_contract(load_reference(EMBEDDING))
    domain = _spec(contract, 0).domain
    assert domain == IntegerDomain(0, 99, [], "vocab")
    template = torch.randint(0, 100, (4, 32))
    draws = [draw_in_domain(domain, seed, template) for seed in range(20)]
    assert all(d.dtype == template.dtype and d.shape == template.shape for d in draws)
    assert all(int(d.min()) >= 0 and int(d.max()) <= 99 for d in draws)
    assert not torch.equal(draws[0], draws[1])  # drawn anew, not the reference's values
    # at a smaller table (CMP-03) the bound follows it
    upper = index_bound(domain, {}, {"vocab": 7})
    assert upper == 7
    assert int(draw_in_domain(domain, 3, template, upper).max()) <= 6


def test_a_page_table_permutation_stays_a_permutation() -> None:
    contract = derive_contract(load_reference(PAGE_TABLE))
    domain = _spec(contract, 1).domain
    assert domain is not None
    assert domain.structure == [IntegerStructure.UNIQUE]
    assert (domain.min, domain.max, domain.index_into) == (0, 23, "arg0.shape[0]")
    template = torch.randperm(24).reshape(4, 6).to(torch.int32)
    for seed in range(10):
        table = draw_in_domain(domain, seed, template)
        assert table.dtype == torch.int32 and table.shape == (4, 6)
        assert torch.equal(table.reshape(-1).sort().values, torch.arange(24, dtype=torch.int32))
    assert not torch.equal(draw_in_domain(domain, 0, template), draw_in_domain(domain, 1, template))


def test_structures_are_claimed_only_where_chance_would_not_make_them() -> None:
    g = torch.Generator().manual_seed(0)
    rows = [torch.rand((6, 10), generator=g).argsort(-1) for _ in range(2)]
    assert derive_domain(rows, {}).structure == [IntegerStructure.UNIQUE_ROWS]
    offsets = [torch.randint(0, 50, (3, 9), generator=g).sort(-1).values for _ in range(2)]
    assert IntegerStructure.SORTED in derive_domain(offsets, {}).structure
    mask = torch.ones(8, 8, dtype=torch.bool).tril()
    assert derive_domain([mask, mask.clone()], {}).structure == [IntegerStructure.FIXED]
    # a few distinct ids from a huge range are unique by chance: no structure claimed
    sparse = [torch.randperm(1_000_000, generator=g)[:5] for _ in range(2)]
    assert derive_domain(sparse, {}).structure == []


def test_fixed_inputs_are_kept_and_sorted_draws_stay_sorted() -> None:
    mask = torch.ones(8, 8, dtype=torch.bool).tril()
    fixed = IntegerDomain(0, 1, [IntegerStructure.FIXED])
    assert torch.equal(draw_in_domain(fixed, 5, mask), mask)
    offsets = torch.arange(12).reshape(2, 6)
    drawn = draw_in_domain(IntegerDomain(0, 40, [IntegerStructure.SORTED]), 5, offsets)
    assert bool((drawn[:, 1:] >= drawn[:, :-1]).all()) and int(drawn.max()) <= 40


def test_offsets_from_zero_to_the_total_keep_both_ends() -> None:
    g = torch.Generator().manual_seed(1)

    def cu_seqlens() -> torch.Tensor:
        inner = torch.randint(1, 512, (7,), generator=g).sort().values
        return torch.cat([torch.tensor([0]), inner, torch.tensor([512])])

    domain = derive_domain([cu_seqlens(), cu_seqlens()], {})
    assert domain.structure == [IntegerStructure.SORTED, IntegerStructure.SPANS]
    for seed in range(5):
        drawn = draw_in_domain(domain, seed, cu_seqlens())
        assert int(drawn[0]) == 0 and int(drawn[-1]) == 512
        assert bool((drawn[1:] >= drawn[:-1]).all())


def test_arbitrary_bits_only_where_the_contract_says_so() -> None:
    packed = torch.randint(0, 16, (64, 64), dtype=torch.uint8)  # only low nibbles seen
    inside = draw_in_domain(IntegerDomain(0, 15), 1, packed)
    assert int(inside.max()) <= 15
    anything = draw_in_domain(IntegerDomain(0, 15, any=True), 1, packed)
    assert int(anything.max()) > 15


def test_an_embedding_candidate_that_would_read_out_of_range_is_verified() -> None:
    verdict = kernelgate.verify(EMBEDDING, DATA / "dom_embedding_checked.py")
    assert verdict.verdict.value == "verified", [g.reason for g in verdict.gates]
    assert verdict.gate("CMP-03").status is Status.PASS  # other vocab sizes included


def test_a_page_table_candidate_that_requires_a_permutation_is_verified() -> None:
    verdict = kernelgate.verify(
        PAGE_TABLE, DATA / "dom_page_table_checked.py", only=["CMP-01", "CMP-03", "ORD-02"]
    )
    assert verdict.verdict.value == "verified", [g.reason for g in verdict.gates]
    assert verdict.gate("CMP-03").status is Status.PASS
