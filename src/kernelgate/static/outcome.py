"""The verdict's ``rules`` entries from the static findings.

A rule entry is ``{id, status, message, where}``: FORBID-01 always has one (``skipped``
when nothing is forbidden, so a reader sees the rule was not in force rather than passed),
and so does every static rule the policy made hard. A ``fail`` entry rejects the verdict;
the gates' results stay as they are beside it ("numerically right, but not a kernel").
The worker's dynamic half (sandbox/forbidden_watch.py) adds the uses it saw at run time to
the same entry (``with_dynamic_uses``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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


def with_dynamic_uses(rules: list[RuleResult], uses: list[dict[str, Any]]) -> list[RuleResult]:
    """``rules`` with FORBID-01's entry failed by the uses the worker saw at run time
    (sandbox/forbidden_watch.py), each where a candidate frame made it; the static
    findings already there stay first. Without uses (or without the rule) unchanged."""
    if not uses:
        return rules
    seen = [
        f"{u['where'] or '(no candidate frame)'} ({u['via']} `{u['name']}`, {u['phase']})"
        for u in uses
    ]
    first = uses[0]
    message = (
        f"{len(uses)} use(s) at run time; first: {first['via']} `{first['name']}`: "
        f"forbidden (`{first['entry']}`)"
    )
    merged = []
    for rule in rules:
        if rule.id == FORBID_RULE and rule.status is not Status.SKIPPED:
            if rule.status is Status.FAIL:
                message = f"{rule.message}; {message}"
            rule = RuleResult(rule.id, Status.FAIL, message, [*rule.where, *seen])
        merged.append(rule)
    return merged
