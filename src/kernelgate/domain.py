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

A device fault or a fault signal (a misaligned or illegal address, SIGSEGV) is not a clean
refusal, but a kernel that faults only on a layout the reference's own inputs never have (a
misaligned offset, a strided, transposed or expanded view) has a precondition it does not
guard: CMP-02 narrows such a kernel to the layouts it handled and names the fault as its
``unguarded_precondition`` (``fault_of``, ``unguarded_preconditions``); ``strict`` verdicts
reject it instead (``verdict.combine``). A fault at the reference's own layout still rejects.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from kernelgate.contract.spec import Contract, Dim, Layout, TensorSpec

if TYPE_CHECKING:  # the gates import this module: keep the gates package out of its imports
    from kernelgate.gates.base import Counterexample, GateContext, GateResult, Incident, Run

FAIL = "fail"  # Status.FAIL's value (Status is a StrEnum)
DOMAIN_GATES = ("CMP-02", "CMP-03", "PRC-01")  # failures these gates can narrow, not reject
SUB_DOMAIN = "sub_domain"  # evidence key where a failing domain gate states what passed
# evidence key (CMP-02's, the verdict's) naming the faults a narrowed kernel does not guard
UNGUARDED = "unguarded_precondition"

# Signals a memory fault ends a process with (on the CPU, what a device fault is on a GPU);
# SIGKILL is not one: it is how resource limits and the timeout end a worker.
FAULT_SIGNALS = ("SIGSEGV", "SIGBUS", "SIGABRT", "SIGILL", "SIGFPE")
# How CUDA names a fault that kills the context; torch puts it in the error it raises.
DEVICE_FAULT_TEXTS = ("misaligned address", "illegal memory access", "illegal address")


def fault_of(incident: Incident) -> str | None:
    """The fault ``incident`` is, in one line, or None when it is no fault (an ordinary
    exception, a hang, an exit, a kill for resources).

    A fault: a sticky device error (the worker lost its CUDA context), a death by a fault
    signal, or an error whose text is CUDA's for a misaligned or illegal address.
    """
    detail = incident.detail.strip().splitlines()[0][:300] if incident.detail.strip() else ""
    if incident.kind == "device-fault":
        return f"device fault: {detail}"
    if incident.kind == "crash" and any(name in detail for name in FAULT_SIGNALS):
        return f"crash: {detail}"
    if incident.kind == "exception" and any(t in detail.lower() for t in DEVICE_FAULT_TEXTS):
        return f"device fault: {detail}"
    return None


def run_or_refusal(
    ctx: GateContext,
    gate_id: str,
    case: Any,
    point: str,
    place: Any = None,
    *,
    faults: bool = False,
) -> Run | dict[str, Any]:
    """Run ``case``; a clean exception becomes a finding tagged with its domain point.

    ``faults`` (CMP-02, at a layout the reference's inputs never have): a fault
    (``fault_of``) becomes a finding too, ``problem: "faulted"``, and its incident names it
    as an unguarded precondition; the next call starts a fresh worker (the session's).
    Otherwise hangs, crashes and device faults still abort the gate (never narrowed).
    """
    from kernelgate.gates.base import GateAborted

    try:
        return ctx.run(gate_id, case, place=place)
    except GateAborted:
        incident = ctx.incidents[-1] if ctx.incidents else None
        if incident is None or ctx.halted:
            raise
        fault = fault_of(incident)
        if faults and fault is not None:
            incident.domain_point = point
            incident.unguarded_precondition = fault
            return {"problem": "faulted", "at": point, "fault": fault, "kind": incident.kind}
        if incident.kind != "exception":
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
            findings = (gate.evidence.get("access_trace") or {}).get("findings")
            if findings and not _traced_outside(findings, gates):
                return False  # the interpreter's access trace found a fault inside the domain
            if findings and not gate.evidence.get("incidents"):
                return True
            incidents = gate.evidence.get("incidents", [])
            return bool(incidents) and all(i.get("domain_point") for i in incidents)
    return True


def _traced_outside(findings: list[dict[str, Any]], gates: list[GateResult]) -> bool:
    """Whether every access-trace finding was seen only in CMP-02 cases at layouts the
    narrowed domain drops (a kernel that reads past a strided view's end assumes a
    contiguous one, as its wrong values there say). A finding seen anywhere else (the
    reference's layout, a shape, a fresh instance), or seen in more places than the log
    kept, rejects: no sub-domain mends it."""
    failed_layouts = {
        label
        for gate in gates
        if gate.id == "CMP-02" and gate.status == FAIL and gate.evidence.get(SUB_DOMAIN)
        for label, outcome in (gate.evidence.get("per_layout") or {}).items()
        if isinstance(outcome, dict) and outcome.get("status") == "fail"
    }
    for finding in findings:
        sites = finding.get("sites")
        if not sites or finding.get("sites_dropped"):
            return False
        if any(gate != "CMP-02" or case not in failed_layouts for gate, case in sites):
            return False
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


def unguarded_preconditions(gates: list[GateResult]) -> list[dict[str, Any]]:
    """The faults failing domain gates excused outside the reference's layouts, one entry
    per gate: ``{"gate", "faults", "layouts", "summary"}`` (CMP-02's evidence)."""
    found = []
    for gate in gates:
        entry = gate.evidence.get(UNGUARDED) if gate.status == FAIL else None
        if entry:
            found.append({"gate": gate.id, **entry})
    return found


def verified_domain(contract: Contract, gates: list[GateResult]) -> dict[str, Any]:
    """What ``Verdict.verified_domain`` holds for a narrowed verdict: the contract narrowed,
    its changes, the gates it rests on, and the faults that stay unguarded outside it."""
    narrowed, changes = narrowed_contract(contract, gates)
    return {
        "contract": narrowed.to_dict(),
        "changes": changes,
        "rests_on": [g.id for g in gates if g.status == FAIL and g.id in DOMAIN_GATES],
        UNGUARDED: unguarded_preconditions(gates),
    }
