"""Contract types: what a kernel must do, stated independently of any candidate.

A contract has four parts (see DESIGN.md): preconditions (the input domain), postconditions
(reference semantics, error model, exceptional-value policy), execution constraints and
provenance. The JSON form is versioned by ``CONTRACT_SCHEMA``; bump it on any change that an
older reader would misread.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from kernelgate.serde import Serializable

CONTRACT_SCHEMA = "kernelgate.contract/4"
# Older ids this reader still reads: /1 lacks only the dims' derivation fields (``Dim``'s
# ``fixed_because``, ``restricted_because``, ``probes``), whose defaults say "not derived";
# /2 lacks only the integer inputs' ``domain`` (None: the reference's own values, as /2
# judged them) and the outputs' ``kind`` and ``indices`` (derived from the output dtype);
# /3 lacks only ``rules`` (nothing forbidden, every static rule a flag, as /3 judged).
READABLE_SCHEMAS = (
    "kernelgate.contract/1",
    "kernelgate.contract/2",
    "kernelgate.contract/3",
    CONTRACT_SCHEMA,
)


class Layout(StrEnum):
    """Memory layouts an input may arrive in. ``contiguous`` is always admitted."""

    CONTIGUOUS = "contiguous"
    OFFSET = "offset"  # contiguous, but the storage offset breaks 16-byte alignment
    STRIDED = "strided"  # a slice with a step along some dim
    TRANSPOSED = "transposed"  # dims permuted (non-unit innermost stride)
    EXPANDED = "expanded"  # broadcast: a stride of 0


class ValueDomain(StrEnum):
    """Which floating-point values a tensor input may hold."""

    FINITE = "finite"
    IEEE = "ieee"  # NaN and +-Inf admitted; the postcondition says how they propagate


class ExceptionalPolicy(StrEnum):
    """How non-finite values must travel from inputs to outputs."""

    PROPAGATE = "ieee-propagate"  # the fp64 oracle's non-finite mask is the law
    UNSPECIFIED = "unspecified"  # EXC-01 is skipped: the contract promises nothing


class FlushPolicy(StrEnum):
    """Whether subnormal inputs and outputs must be preserved or may be flushed to zero."""

    PRESERVE = "preserve"
    FLUSH_ALLOWED = "flush-allowed"


@dataclass
class Dim(Serializable):
    """A symbolic size: ``name in [min, max]`` and ``name % multiple_of == 0``.

    ``reference`` is the value at the reference shape. ``max=None`` means no stated upper
    bound: gates that draw large sizes pick them within the memory they have.

    A derived dim (``contract.derive``) says what its range rests on: ``probes`` holds the
    sizes the reference was run at (``passed``, ``failed``, ``not_probed``: too large to
    try), ``restricted_because`` why ``min``, ``max`` or ``multiple_of`` are not the widest
    (the reference's error at the probes they exclude), and ``fixed_because`` why a dim
    that does not vary cannot. A dim may name no tensor axis: a constructor size that shapes
    only parameters (a hidden width, a group count) is varied by rebuilding the model.
    """

    name: str
    reference: int
    min: int = 1
    max: int | None = None
    multiple_of: int = 1
    varies: bool = True
    fixed_because: str | None = None
    restricted_because: str | None = None
    probes: dict[str, list[int]] | None = None

    def admits(self, value: int) -> bool:
        if not self.varies:
            return value == self.reference
        if value < self.min or (self.max is not None and value > self.max):
            return False
        return value % self.multiple_of == 0


class IntegerStructure(StrEnum):
    """A pattern every draw of an integer input has, kept when its values are drawn anew."""

    FIXED = "fixed"  # the same values at every seed (a mask, positions): never redrawn
    UNIQUE = "unique"  # no value repeats in the tensor (a permutation, a page table)
    UNIQUE_ROWS = "unique-rows"  # no value repeats along the last dim (per-row permutations)
    SORTED = "sorted"  # non-decreasing along the last dim (offsets, sorted expert ids)
    SPANS = "spans"  # sorted rows from min to max, both kept (cu_seqlens-style offsets)


@dataclass
class IntegerDomain(Serializable):
    """The values an integer, bool or packed input may hold, as the reference draws them.

    Derived from the reference's own ``get_inputs()`` at two seeds (``contract.derive``):
    every drawn value lies in ``[min, max]`` (both seen in a draw), with ``structure`` kept.
    ``index_into`` names what the values index where they exactly span it, ``arg1.shape[0]``
    (an axis of another input) or a dim name such as ``V`` (a table held by the model): at
    other sizes (CMP-03) the bound follows it. ``any`` admits every value of the dtype
    (arbitrary bits: only where a contract says so).
    """

    min: int
    max: int
    structure: list[IntegerStructure] = field(default_factory=list)
    index_into: str | None = None
    any: bool = False


@dataclass
class TensorSpec(Serializable):
    """One tensor input: its dims (names of ``Dim`` or literal sizes), dtypes and layouts."""

    name: str
    shape: list[str | int]
    dtypes: list[str]
    layouts: list[Layout] = field(default_factory=lambda: [Layout.CONTIGUOUS, Layout.OFFSET])
    values: ValueDomain = ValueDomain.IEEE
    may_alias: bool = False
    integer_values: str | None = None  # "reference": drawn as the reference's get_inputs does
    # For an integer, bool or packed input: the domain its values are drawn in (None: the
    # reference's own ``get_inputs()`` values, unchanged, as contracts before /3 had it).
    domain: IntegerDomain | None = None
    # [lo, hi] (either may be None): generated values are folded into this interval, for
    # inputs whose meaning restricts them (a log-decay <= 0, a gate in [0, 1]).
    value_range: list[float | None] | None = None
    # A zero pattern every input the reference makes has ("upper-triangular": zero below
    # the diagonal of the last two dims; "lower-triangular": above it): generated values
    # keep those zeros, since a problem built on triangular matrices is not about others.
    structure: str | None = None


@dataclass
class ScalarSpec(Serializable):
    """A non-tensor positional input, fixed at the value the reference passes."""

    name: str
    value: Any


class OutputKind(StrEnum):
    """How an output is compared with the oracle's (``gates.base.GateContext.assess``)."""

    VALUES = "values"  # floating: within the contract's error model
    EXACT = "exact"  # integer or bool: equal, element for element
    INDICES = "indices"  # positions into a tensor the reference computes: by equivalence


class IndexOrder(StrEnum):
    """What the order of an index output must be (from the producing op's arguments)."""

    ANY = "any"  # a set: topk(sorted=False)
    VALUES = "values"  # the gathered values in the oracle's order; ties broken any way
    STABLE = "stable"  # exactly the oracle's indices: sort(stable=True) fixes tie order


@dataclass
class IndexOutput(Serializable):
    """Which aten op produced an index output, and what it promises.

    The candidate's indices are judged by gathering, along ``dim`` (None: the flattened
    tensor), the op's own input as the float64 oracle computes it (``call``: which call of
    ``op`` in the forward, counting from 0), and comparing with the oracle's values there.
    """

    op: str
    call: int = 0
    dim: int | None = -1
    order: IndexOrder = IndexOrder.VALUES
    distinct: bool = False  # no index repeats along dim (topk, sort): a set, not a multiset


@dataclass
class OutputSpec(Serializable):
    name: str
    shape: list[str | int]
    dtype: str
    # None: from the dtype (floating: values, else exact), as contracts before /3 had it
    kind: OutputKind | None = None
    indices: IndexOutput | None = None


@dataclass
class ErrorModelSpec(Serializable):
    """Which error model derives the tolerance, and its inputs (see ``oracle.error_models``)."""

    name: str = "ensemble"
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Postcondition(Serializable):
    reference: str  # what the oracle evaluates: a file path, or a library op id
    error_model: ErrorModelSpec = field(default_factory=ErrorModelSpec)
    exceptional: ExceptionalPolicy = ExceptionalPolicy.PROPAGATE
    flush: FlushPolicy = FlushPolicy.PRESERVE
    in_place: list[str] = field(default_factory=list)  # inputs the kernel may write


@dataclass
class ResourceBudget(Serializable):
    """Per-kernel limits; the defaults are the H100/H200 hardware limits."""

    registers_per_thread: int = 255
    shared_memory_bytes: int = 227 * 1024
    spill_bytes: int = 0


@dataclass
class ExecutionConstraints(Serializable):
    deterministic: bool = True
    no_out_of_bounds: bool = True
    no_data_race: bool = True
    budget: ResourceBudget = field(default_factory=ResourceBudget)


@dataclass
class RulesPolicy(Serializable):
    """The rules beside the gates that this contract puts in force (docs/rules.md).

    ``forbidden``: callables and modules a kernel for this contract must not use, as dotted
    names (``torch.topk``, ``fla.ops.kda``; a name forbids everything under it): FORBID-01.
    ``hard_static``: static rule ids (``STATIC-TIMING``, ...) whose findings reject instead
    of flagging. Declarative, like the rest of the contract: the same for every candidate.
    """

    forbidden: list[str] = field(default_factory=list)
    hard_static: list[str] = field(default_factory=list)


@dataclass
class Provenance(Serializable):
    """Where the contract came from, so a verdict can say what it rests on."""

    source: str  # "derived" | "library" | "file"
    detail: str
    reference_sha256: str | None = None


@dataclass
class Contract(Serializable):
    name: str
    dims: list[Dim]
    inputs: list[TensorSpec | ScalarSpec]
    outputs: list[OutputSpec]
    postcondition: Postcondition
    execution: ExecutionConstraints = field(default_factory=ExecutionConstraints)
    provenance: Provenance = field(default_factory=lambda: Provenance("file", "unspecified"))
    rules: RulesPolicy = field(default_factory=RulesPolicy)
    schema: str = CONTRACT_SCHEMA

    def dim(self, name: str) -> Dim:
        for dim in self.dims:
            if dim.name == name:
                return dim
        raise KeyError(f"contract {self.name!r} has no dim {name!r}")

    @property
    def tensor_inputs(self) -> list[TensorSpec]:
        return [spec for spec in self.inputs if isinstance(spec, TensorSpec)]
