"""The verdict's ``rules`` entries from the static findings.

A rule entry is ``{id, status, message, where}``: FORBID-01 always has one (``skipped``
when nothing is forbidden, so a reader sees the rule was not in force rather than passed),
and so does every static rule the policy made hard. A ``fail`` entry rejects the verdict;
the gates' results stay as they are beside it ("numerically right, but not a kernel").
FORBID-01's entry is static evidence only here; the worker's dynamic half, when it exists,
adds its call sites to the same entry.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernelgate.gates.base import Status
from kernelgate.serde import Serializable
from kernelgate.static.base import Finding, Severity

FORBID_RULE = "FORBID-01"


@dataclass
class RuleResult(Serializable):
    id: str
    status: Status
    message: str
    where: list[str] = field(default_factory=list)  # "file:line" of each finding


def rule_results(
    findings: list[Finding], forbidden: tuple[str, ...], hard: frozenset[str] = frozenset()
) -> list[RuleResult]:
    """One entry for FORBID-01 and for each static rule made hard, in that order."""
    results = []
    for rule_id in (FORBID_RULE, *sorted(hard - {FORBID_RULE})):
        mine = [f for f in findings if f.rule == rule_id and f.severity is Severity.HARD]
        if rule_id == FORBID_RULE and not forbidden:
            results.append(RuleResult(rule_id, Status.SKIPPED, "nothing is forbidden"))
        elif mine:
            results.append(
                RuleResult(
                    rule_id,
                    Status.FAIL,
                    f"{len(mine)} finding(s); first: {mine[0].message}",
                    [f.where for f in mine],
                )
            )
        else:
            scope = f"forbidden: {', '.join(forbidden)}" if rule_id == FORBID_RULE else "hard"
            results.append(RuleResult(rule_id, Status.PASS, f"no static finding ({scope})"))
    return results
