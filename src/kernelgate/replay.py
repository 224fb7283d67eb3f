"""``kernelgate replay EVIDENCE.json``: re-run a saved verdict's failing gates from the
evidence alone and say whether each failure is still the same, bit for bit.

Everything a gate's cases depend on is in the evidence: the base seed (every case's seed is
derived from it and the case's index, ``GateContext.case_seed``), the contract judged
against (``contract``), and how verify was asked (``judged_with``: device, contract file,
rule options, the gates selected, the timeouts). The programs themselves are read again
from their paths and must still have the SHA-256 the evidence holds: a changed file would
replay a different failure under the same name (``--allow-changed`` replays it anyway and
says so).

A replay first runs each failing gate on its stored case only (``GateContext.focus``: the
gates with independent cases skip the others, their seeds unchanged). A failure that
needs the calls before it (a candidate that caches, a gate whose cases form one sequence)
is then replayed as it was judged: every gate the verdict ran, in order. Either way the
candidate runs only in the confined worker that ``verify`` starts; this module compares
JSON in the judge. "Bit for bit" is the counterexample's ``case``, ``seed``, ``inputs``
and ``findings`` (positions and values) and the gate's ``reason``, in their JSON form.

``--shrunk`` replays the stored shrunk case instead (``counterexample.shrunk``,
``kernelgate.shrink``): its values are rebuilt from the evidence and run once.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelgate.errors import KernelgateError
from kernelgate.gates import GATE_IDS
from kernelgate.serde import Serializable, to_jsonable
from kernelgate.verdict import VERDICT_SCHEMA, Verdict

# Fields of a counterexample that must come back equal for a failure to be "the same".
COMPARED_FIELDS = ("case", "seed", "inputs", "findings")
# Flags of the stored verify command and whether each takes a value (cli.verify_command).
VALUE_FLAGS = {"--device", "--contract", "--only", "--seed", "--forbid", "--hard-static"}
VALUE_FLAGS |= {"--min-authored-share"}
SWITCH_FLAGS = {"--sanitize", "--strict", "--no-access-trace"}
# Gates that run one stored case alone when a replay focuses them (``GateContext.focus``);
# the others' cases form one sequence (ORD-02, MEM-01) or depend on each other (CMP-03).
FOCUSABLE = frozenset({"CMP-01", "CMP-02", "EXC-01", "EXC-02", "ORD-01"})
# What ``replay`` says per gate.
REPRODUCED = "reproduced"  # fails again with the same counterexample and reason
DIFFERENT = "fails differently"  # fails again, but not as stored (the differences listed)
GONE = "no longer fails"


@dataclass
class JudgedWith:
    """The stored verify command, read back: what a replay passes to ``verify`` again."""

    reference: str
    candidate: str
    device: str = "cpu"
    contract_file: str | None = None
    only: list[str] | None = None
    seed: int = 0
    forbid: list[str] = field(default_factory=list)
    hard_static: list[str] = field(default_factory=list)
    sanitize: bool = False
    strict: bool = False
    access_trace: bool = True
    min_authored_share: float | None = None
    timeout: float = 60.0
    compile_timeout: float | None = None


@dataclass
class GateReplay(Serializable):
    """One gate's replay: what it showed and how it was run."""

    gate: str
    outcome: str  # REPRODUCED, DIFFERENT or GONE
    how: str  # "stored case", "every gate judged", or "shrunk case"
    reason: str  # the gate's reason this time
    differences: list[str] = field(default_factory=list)
    counterexample: dict[str, Any] | None = None  # this time's, JSON form


@dataclass
class ReplayReport(Serializable):
    evidence: str
    gates: list[GateReplay]
    changed: list[str] = field(default_factory=list)  # programs replayed despite new digests
    seconds: float = 0.0

    @property
    def still_fails(self) -> bool:
        return any(g.outcome != GONE for g in self.gates)

    def to_dict(self) -> dict[str, Any]:
        return super().to_dict() | {"still_fails": self.still_fails}


def load_evidence(path: str | Path) -> dict[str, Any]:
    """The evidence's JSON, refused (``KernelgateError``, exit 2) unless it is a readable
    verdict of this schema."""
    path = Path(path)
    if not path.is_file():
        raise KernelgateError(f"evidence file not found: {path}")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise KernelgateError(f"evidence {path} is not JSON: {exc}") from None
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema != VERDICT_SCHEMA:
        raise KernelgateError(
            f"evidence {path} has schema {schema!r}; replay reads {VERDICT_SCHEMA!r} "
            "(verify again with this kernelgate to get one)"
        )
    return data


def failing_gates(evidence: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Gate id -> its stored result, for every failed gate that holds a counterexample."""
    return {
        g["id"]: g
        for g in evidence.get("gates", [])
        if g.get("status") == "fail" and g.get("counterexample")
    }


def parse_command(argv: Sequence[str]) -> JudgedWith:
    """A stored ``kernelgate verify REF CAND [flags]`` command, read back; a flag this
    kernelgate does not know is refused rather than dropped (it may change the cases)."""
    if len(argv) < 4 or list(argv[:2]) != ["kernelgate", "verify"]:
        raise KernelgateError(f"not a stored verify command: {shlex.join(argv)}")
    judged = JudgedWith(reference=argv[2], candidate=argv[3])
    rest = list(argv[4:])
    while rest:
        flag = rest.pop(0)
        if flag in SWITCH_FLAGS:
            judged.sanitize |= flag == "--sanitize"
            judged.strict |= flag == "--strict"
            judged.access_trace &= flag != "--no-access-trace"
            continue
        if flag not in VALUE_FLAGS or not rest:
            raise KernelgateError(f"the stored verify command has {flag!r}, unknown to replay")
        value = rest.pop(0)
        if flag == "--device":
            judged.device = value
        elif flag == "--contract":
            judged.contract_file = value
        elif flag == "--only":
            judged.only = [*(judged.only or []), value]
        elif flag == "--seed":
            judged.seed = int(value)
        elif flag == "--forbid":
            judged.forbid.append(value)
        elif flag == "--hard-static":
            judged.hard_static.append(value)
        else:
            judged.min_authored_share = float(value)
    return judged


def judged_with(evidence: dict[str, Any]) -> JudgedWith:
    """How the stored verdict was asked for: its ``judged_with`` record, or, in evidence
    written before that existed, a counterexample's verify command (which names the gate
    selection of one gate only; the replay then re-runs the gates that did run)."""
    record = evidence.get("judged_with") or {}
    if record.get("command"):
        judged = parse_command(record["command"])
        judged.only = record.get("only")
        judged.timeout = float(record.get("timeout") or judged.timeout)
        judged.compile_timeout = record.get("compile_timeout")
    else:
        stored = next(iter(failing_gates(evidence).values()), None)
        if stored is None:
            raise KernelgateError("the evidence holds no failed gate with a counterexample")
        cx = stored["counterexample"]
        judged = parse_command(shlex.split(cx.get("verify") or cx["replay"]))
        judged.only = [
            g["id"]
            for g in evidence.get("gates", [])
            if not str(g.get("reason", "")).startswith("not selected (--only)")
        ]
    judged.seed = int(evidence.get("seed", judged.seed))
    return judged


def comparable(gate: dict[str, Any], fields: Sequence[str] = COMPARED_FIELDS) -> dict[str, Any]:
    """What must come back equal: the reason and the counterexample's case, seed, inputs
    and findings (JSON form: NaN as "nan", tuples as lists)."""
    cx = gate.get("counterexample") or {}
    return json.loads(
        json.dumps(
            to_jsonable({"reason": gate.get("reason")} | {k: cx.get(k) for k in fields}),
            sort_keys=True,
        )
    )


def differences(
    stored: dict[str, Any], now: dict[str, Any], fields: Sequence[str] = COMPARED_FIELDS
) -> list[str]:
    """One line per compared field that differs (empty: the same, bit for bit)."""
    old, new = comparable(stored, fields), comparable(now, fields)
    return [
        f"{key}: stored {_short(old[key])}, now {_short(new[key])}"
        for key in old
        if old[key] != new[key]
    ]


def _short(value: Any, limit: int = 160) -> str:
    text = json.dumps(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_digests(evidence: dict[str, Any], reference: Path, candidate: Path) -> list[str]:
    """The programs whose text no longer has the SHA-256 the evidence holds (a digest the
    evidence lacks is not checked)."""
    changed = []
    for what, path, stored in (
        ("reference", reference, evidence.get("reference_sha256")),
        ("candidate", candidate, evidence.get("candidate_sha256")),
    ):
        if not path.is_file():
            raise KernelgateError(
                f"the {what} {path} the evidence names is not there (replay from the folder "
                "verify ran in)"
            )
        if stored is None:
            continue
        if hashlib.sha256(path.read_text().encode()).hexdigest() != stored:
            changed.append(f"{what} {path}")
    return changed


@contextmanager
def _access_trace(on: bool) -> Iterator[None]:
    """The access trace as the verdict had it (``--no-access-trace`` sets the variable)."""
    from kernelgate.sandbox.access_trace import TRACE_ENV

    before = os.environ.get(TRACE_ENV)
    if not on:
        os.environ[TRACE_ENV] = "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(TRACE_ENV, None)
        else:
            os.environ[TRACE_ENV] = before


def _verify(
    evidence: dict[str, Any],
    judged: JudgedWith,
    only: list[str],
    focus: dict[str, str] | None,
    shrunk_cases: dict[str, Any] | None = None,
) -> Verdict:
    """``verify`` as the evidence asked for it, on ``only`` (and ``focus``)."""
    from kernelgate.contract.spec import Contract
    from kernelgate.formats.problem import load_problem
    from kernelgate.pipeline import verify
    from kernelgate.sandbox.compile_budget import DEFAULT_COMPILE_TIMEOUT

    try:
        contract = Contract.from_dict(evidence["contract"])
    except (KeyError, TypeError, ValueError) as exc:
        raise KernelgateError(f"the evidence's contract cannot be read: {exc}") from None
    stated = Path(judged.reference)
    problem = load_problem(stated) if stated.is_dir() else None
    with _access_trace(judged.access_trace):
        return verify(
            problem.reference if problem is not None else stated,
            judged.candidate,
            contract=contract,
            device=judged.device,
            timeout=judged.timeout,
            compile_timeout=judged.compile_timeout or DEFAULT_COMPILE_TIMEOUT,
            seed=judged.seed,
            only=only,
            sanitize=judged.sanitize,
            forbid=judged.forbid,
            hard_static=judged.hard_static,
            strict=judged.strict,
            problem=problem,
            min_authored_share=judged.min_authored_share,
            focus=focus,
            shrunk_cases=shrunk_cases,
        )


def _judged_gate(verdict: Verdict, gate_id: str) -> dict[str, Any]:
    return verdict.gate(gate_id).to_dict()


def _outcome(
    gate_id: str,
    stored: dict[str, Any],
    now: dict[str, Any],
    how: str,
    fields: Sequence[str] = COMPARED_FIELDS,
) -> GateReplay:
    if now.get("status") == "skipped":  # aborted by an incident: RES-01 fails instead
        why = [f"status: stored fail, now skipped ({now.get('reason', '')})"]
        return GateReplay(gate_id, DIFFERENT, how, now.get("reason", ""), why)
    if now.get("status") != "fail":
        return GateReplay(gate_id, GONE, how, now.get("reason", ""))
    found = differences(stored, now, fields)
    return GateReplay(
        gate_id,
        DIFFERENT if found else REPRODUCED,
        how,
        now.get("reason", ""),
        found,
        now.get("counterexample"),
    )


def replay(
    evidence_path: str | Path,
    gates: Sequence[str] = (),
    *,
    shrunk: bool = False,
    allow_changed: bool = False,
    timeout: float | None = None,
) -> ReplayReport:
    """Replay ``gates`` (default: every failed gate with a counterexample) of the evidence
    at ``evidence_path``. Raises ``KernelgateError`` for bad input: a missing or unreadable
    file, another schema, a gate the evidence holds no failure of, a program whose digest
    changed (unless ``allow_changed``). ``timeout`` overrides the stored seconds per call."""
    started = time.monotonic()
    evidence = load_evidence(evidence_path)
    failed = failing_gates(evidence)
    unknown = [g for g in gates if g not in GATE_IDS]
    if unknown:
        raise KernelgateError(f"unknown gate(s) {', '.join(unknown)}; known: {', '.join(GATE_IDS)}")
    missing = [g for g in gates if g not in failed]
    if missing:
        held = ", ".join(failed) or "none"
        raise KernelgateError(
            f"the evidence holds no failure of {', '.join(missing)} to replay (failed with a "
            f"counterexample: {held})"
        )
    wanted = list(gates) or list(failed)
    if not wanted:
        raise KernelgateError("the evidence holds no failed gate with a counterexample")
    judged = judged_with(evidence)
    if timeout is not None:
        judged.timeout = timeout
    # the judged reference file (a problem folder's reference.py where one was stated)
    reference_file = Path(evidence.get("reference") or judged.reference)
    changed = check_digests(evidence, reference_file, Path(judged.candidate))
    if changed and not allow_changed:
        raise KernelgateError(
            f"changed since the verdict (SHA-256 differs from the evidence's): "
            f"{'; '.join(changed)}; the stored failure may not be this program's. Replay it "
            "anyway with --allow-changed"
        )
    if shrunk:
        results = _replay_shrunk(evidence, judged, {g: failed[g] for g in wanted})
        return ReplayReport(
            str(evidence_path), results, changed, round(time.monotonic() - started, 2)
        )
    results = _replay_cases(evidence, judged, {g: failed[g] for g in wanted})
    return ReplayReport(str(evidence_path), results, changed, round(time.monotonic() - started, 2))


def _replay_cases(
    evidence: dict[str, Any], judged: JudgedWith, stored: dict[str, dict[str, Any]]
) -> list[GateReplay]:
    """Each gate on its stored case first; those not reproduced so, as the verdict ran them
    (every gate it judged, in order: the calls before a failure are part of it)."""
    # A gate whose stored verify command selects other gates (RES-01 reporting another
    # gate's incident) replays with those; focus only where the gate reran itself.
    own: dict[str, str] = {}
    needs: list[str] = []
    for gate_id, gate in stored.items():
        cx = gate["counterexample"]
        selected = _selected_by(cx) or [gate_id]
        needs += [g for g in selected if g not in needs]
        if selected == [gate_id] and gate_id in FOCUSABLE:
            own[gate_id] = cx["case"]
    first = _verify(evidence, judged, [*needs, *[g for g in stored if g not in needs]], own)
    results = {
        g: _outcome(
            g, stored[g], _judged_gate(first, g), "stored case" if g in own else "whole gate"
        )
        for g in stored
    }
    again = [g for g, r in results.items() if r.outcome != REPRODUCED]
    if again:
        # the gates the verdict ran, up to the last one replayed: later ones (in the
        # pipeline's order) cannot have changed what it saw
        last = max(GATE_IDS.index(g) for g in again)
        every = [g for g in judged.only or GATE_IDS if GATE_IDS.index(g) <= last]
        second = _verify(evidence, judged, every, None)
        for g in again:
            results[g] = _outcome(g, stored[g], _judged_gate(second, g), "every gate judged")
    return list(results.values())


def _replay_shrunk(
    evidence: dict[str, Any], judged: JudgedWith, stored: dict[str, dict[str, Any]]
) -> list[GateReplay]:
    """Each gate judged on its stored shrunk case alone, as the first call of the worker (as
    shrinking confirmed it); the same when its reason and findings come back equal."""
    from kernelgate.shrink import rebuild_case

    without = [g for g, gate in stored.items() if not gate["counterexample"].get("shrunk")]
    if without:
        raise KernelgateError(
            f"the evidence holds no shrunk case of {', '.join(without)} (verified with "
            "--no-shrink, a gate that is not shrunk, or a shrunk case not kept: see the "
            "gate's evidence.shrink)"
        )
    cases = {}
    for gate_id, gate in stored.items():
        try:
            cases[gate_id] = rebuild_case(gate["counterexample"]["shrunk"])
        except (KeyError, TypeError, ValueError, IndexError, RuntimeError) as exc:
            raise KernelgateError(f"{gate_id}'s shrunk case cannot be read: {exc}") from None
    verdict = _verify(evidence, judged, list(stored), None, shrunk_cases=cases)
    results = []
    for gate_id, gate in stored.items():
        shrunk = gate["counterexample"]["shrunk"]
        now = _judged_gate(verdict, gate_id)
        want = {"reason": shrunk["reason"], "counterexample": shrunk}
        results.append(_outcome(gate_id, want, now, "shrunk case", fields=("findings",)))
    return results


def _selected_by(counterexample: dict[str, Any]) -> list[str]:
    """The gates a counterexample's verify command selects (``--only``)."""
    command = counterexample.get("verify") or counterexample.get("replay") or ""
    argv = shlex.split(command)
    if argv[:2] != ["kernelgate", "verify"]:
        return []
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--only"]


def replay_command(evidence_path: str | Path, gate_id: str, *, shrunk: bool = False) -> str:
    """The command that replays ``gate_id``'s stored failure (or its shrunk case)."""
    argv = ["kernelgate", "replay", str(evidence_path), "--gate", gate_id]
    return shlex.join([*argv, "--shrunk"] if shrunk else argv)
