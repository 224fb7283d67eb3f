"""The verified sub-domain: when a candidate is right on part of its contract's domain.

Three gates probe *domain dimensions* rather than behaviour at the reference point: CMP-02
(layouts), CMP-03 (shapes) and PRC-01 (dtypes other than the reference's own). When only
they fail, and each can state a part of the domain on which nothing failed, the verdict is
``narrowed``: the contract with its layouts, dims or dtypes reduced to what passed, in
contract form, so a dispatcher can call the kernel only there. Every other gate runs at the
reference shape on contiguous inputs of the reference's dtype, a point every sub-domain
keeps, so "the rest of the contract holds on the sub-domain" is what those gates showed.

Any other failure (values at the reference point, NaN handling, memory, determinism) rejects.
An execution incident rejects too, except a clean exception raised at a layout or shape that
the sub-domain excludes (the candidate refusing an input it does not support): the domain
gate tags those (``Incident.domain_point``) and fails on them itself.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from kernelgate.contract.spec import Contract, Dim, Layout, TensorSpec

if TYPE_CHECKING:  # the gates import this module: keep the gates package out of its imports
    from kernelgate.gates.base import Counterexample, GateContext, GateResult, Run

FAIL = "fail"  # Status.FAIL's value (Status is a StrEnum)
DOMAIN_GATES = ("CMP-02", "CMP-03", "PRC-01")  # failures these gates can narrow, not reject
SUB_DOMAIN = "sub_domain"  # evidence key where a failing domain gate states what passed


def run_or_refusal(
    ctx: GateContext, gate_id: str, case: Any, point: str, place: Any = None
) -> Run | dict[str, Any]:
    """Run ``case``; a clean exception becomes a finding tagged with its domain point.

    Hangs, crashes and device faults still abort the gate (they are never narrowed).
    """
    from kernelgate.gates.base import GateAborted

    try:
        return ctx.run(gate_id, case, place=place)
    except GateAborted:
        incident = ctx.incidents[-1] if ctx.incidents else None
        if incident is None or incident.kind != "exception" or ctx.halted:
            raise
        incident.domain_point = point
        return {"problem": "raised", "at": point, "detail": incident.detail[:500]}


def refusal_counterexample(
    ctx: GateContext, gate_id: str, case: Any, finding: dict[str, Any], inputs: list[dict[str, Any]]
) -> Counterexample:
    """The counterexample for a case the candidate raised on (no outputs to show)."""
    from kernelgate.gates.base import Counterexample

    return Counterexample(
        case=case.label,
        seed=case.seed,
        inputs=inputs,
        findings=[finding],
        replay=ctx.replay(gate_id),
    )


def _incidents_outside(gates: list[GateResult]) -> bool:
    """Whether RES-01 failed only on incidents a domain gate tagged as outside its domain."""
    for gate in gates:
        if gate.id == "RES-01" and gate.status == FAIL:
            if (gate.evidence.get("access_trace") or {}).get("findings"):
                return False  # the interpreter's access trace found a fault: no domain mends it
            incidents = gate.evidence.get("incidents", [])
            return bool(incidents) and all(i.get("domain_point") for i in incidents)
    return True


def narrowable(gates: list[GateResult]) -> bool:
    """Whether the failures are all domain failures, each with a stated sub-domain."""
    failed = [g for g in gates if g.status == FAIL]
    if not failed:
        return False
    for gate in failed:
        if gate.id == "RES-01":
            if not _incidents_outside(gates):
                return False
            continue
        if gate.id not in DOMAIN_GATES or not gate.evidence.get(SUB_DOMAIN):
            return False
    return any(g.id in DOMAIN_GATES for g in failed)


def narrowed_contract(contract: Contract, gates: list[GateResult]) -> tuple[Contract, list[str]]:
    """The contract reduced to the sub-domains the failing domain gates state, and the changes."""
    narrowed = copy.deepcopy(contract)
    changes: list[str] = []
    for gate in gates:
        if gate.status != FAIL or gate.id not in DOMAIN_GATES:
            continue
        sub = gate.evidence.get(SUB_DOMAIN) or {}
        for name, layouts in (sub.get("layouts") or {}).items():
            for spec in narrowed.inputs:
                if isinstance(spec, TensorSpec) and spec.name == name:
                    kept = [lay for lay in spec.layouts if lay.value in layouts]
                    if Layout.CONTIGUOUS not in kept:
                        kept.insert(0, Layout.CONTIGUOUS)
                    dropped = [lay.value for lay in spec.layouts if lay not in kept]
                    if dropped:
                        changes.append(f"{gate.id}: input {name} layouts without {dropped}")
                    spec.layouts = kept
        for name, dtypes in (sub.get("dtypes") or {}).items():
            for spec in narrowed.inputs:
                if isinstance(spec, TensorSpec) and spec.name == name:
                    dropped = [d for d in spec.dtypes if d not in dtypes]
                    if dropped:
                        changes.append(f"{gate.id}: input {name} dtypes without {dropped}")
                    spec.dtypes = [d for d in spec.dtypes if d in dtypes]
        for name, fields in (sub.get("dims") or {}).items():
            for index, dim in enumerate(narrowed.dims):
                if dim.name == name:
                    new = Dim(**{**dim.to_dict(), **fields})
                    narrowed.dims[index] = new
                    changes.append(f"{gate.id}: {describe_dim(dim)} -> {describe_dim(new)}")
    narrowed.provenance.detail += " (narrowed by kernelgate to the sub-domain that passed)"
    return narrowed, changes


def describe_dim(dim: Dim) -> str:
    """``name in [min, max], name % k == 0`` (or ``name == ref`` when fixed)."""
    if not dim.varies:
        return f"{dim.name} == {dim.reference}"
    text = f"{dim.name} in [{dim.min}, {dim.max if dim.max is not None else 'inf'}]"
    if dim.multiple_of > 1:
        text += f", {dim.name} % {dim.multiple_of} == 0"
    return text


def verified_domain(contract: Contract, gates: list[GateResult]) -> dict[str, Any]:
    """What ``Verdict.verified_domain`` holds for a narrowed verdict."""
    narrowed, changes = narrowed_contract(contract, gates)
    return {
        "contract": narrowed.to_dict(),
        "changes": changes,
        "rests_on": [g.id for g in gates if g.status == FAIL and g.id in DOMAIN_GATES],
    }
