"""The static layer: an AST pass over the candidate's files before anything runs.

Adding a rule: write its module under ``rules/`` (a ``Rule`` subclass), add one line to
``RULES``. ``analyse`` parses the candidate module and the files of its own folder it
imports (never importing or running them) and returns every rule's findings; severities
come from the policy (``StaticPolicy``), not from the rules. ``rule_results`` turns the
findings into the verdict's ``rules`` entries. docs/rules.md describes every rule, and what
static analysis cannot see.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kernelgate.static.base import Finding, Rule, Severity, StaticContext
from kernelgate.static.outcome import RuleResult, rule_results, with_dynamic_uses
from kernelgate.static.rules.backend import BackendSwitchRule
from kernelgate.static.rules.cache import IdentityCacheRule
from kernelgate.static.rules.downcast import DowncastRule
from kernelgate.static.rules.fallback import FallbackRule
from kernelgate.static.rules.file_io import FileNetworkProcessRule
from kernelgate.static.rules.forbidden import ForbiddenNameRule
from kernelgate.static.rules.foreign_state import ForeignStateRule
from kernelgate.static.rules.graph import CudaGraphRule
from kernelgate.static.rules.monkeypatch import MonkeypatchRule
from kernelgate.static.rules.timing import TimingBranchRule
from kernelgate.static.rules.vendored import VendoredSourceRule
from kernelgate.static.sources import candidate_files

RULES: tuple[type[Rule], ...] = (
    TimingBranchRule,
    DowncastRule,
    BackendSwitchRule,
    IdentityCacheRule,
    CudaGraphRule,
    FallbackRule,
    ForeignStateRule,
    MonkeypatchRule,
    FileNetworkProcessRule,
    VendoredSourceRule,
    ForbiddenNameRule,
)
RULE_IDS = tuple(rule.id for rule in RULES)


@dataclass(frozen=True)
class StaticPolicy:
    """What the contract and the options ask of the static layer.

    ``forbidden``: dotted names FORBID-01 rejects. ``hard``: rule ids whose findings reject
    (by default every static rule only flags). ``float32_contract``: STATIC-DOWNCAST
    applies.
    """

    forbidden: tuple[str, ...] = ()
    hard: frozenset[str] = field(default_factory=frozenset)
    float32_contract: bool = True


def analyse(candidate: str | Path, policy: StaticPolicy = StaticPolicy()) -> list[Finding]:
    """Every finding of every rule over ``candidate`` and its local imports, in rule order."""
    unknown = set(policy.hard) - set(RULE_IDS)
    if unknown:
        raise ValueError(f"unknown static rule(s) {sorted(unknown)}; known: {RULE_IDS}")
    candidate = Path(candidate)
    notes: list[str] = []
    ctx = StaticContext(
        files=candidate_files(candidate, notes),
        float32_contract=policy.float32_contract,
        forbidden=tuple(policy.forbidden),
        notes=notes,
    )
    root = candidate.resolve().parent
    findings: list[Finding] = []
    for rule_cls in RULES:
        rule = rule_cls()
        hard = rule.hard_by_nature or rule.id in policy.hard
        for hit in sorted(rule.check(ctx), key=lambda h: (str(h.source.path), h.line)):
            try:
                shown = str(hit.source.path.relative_to(root))
            except ValueError:
                shown = hit.source.path.name
            findings.append(
                Finding(
                    rule=rule.id,
                    file=shown,
                    line=hit.line,
                    message=hit.message,
                    severity=Severity.HARD if hard else Severity.FLAG,
                )
            )
    return findings


__all__ = [
    "RULES",
    "RULE_IDS",
    "Finding",
    "RuleResult",
    "Severity",
    "StaticPolicy",
    "analyse",
    "rule_results",
    "with_dynamic_uses",
]
