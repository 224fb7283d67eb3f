"""What CI systems read from a verdict: SARIF 2.1.0, and a failure told as plain text.

``sarif_log(evidence)`` turns a verdict's JSON (``Verdict.to_dict()``) into a SARIF log with
one result per failed gate and per failed rule, located in the candidate's file (a failed
rule at each ``file:line`` it names), so code-scanning views (GitHub, GitLab, Azure) show a
rejected kernel where its source is. ``failure_text(evidence)`` is what the pytest plugin
prints for a failed pair: each failure's reason, its counterexample and the command that
replays it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
FINDINGS_SHOWN = 3  # counterexample findings in a message (the evidence keeps them all)
MODEL_CLASS = re.compile(r"^class\s+ModelNew\b", re.MULTILINE)


def _artifact(path: str) -> dict[str, Any]:
    """A SARIF artifactLocation: relative paths stay relative (to the checkout's root)."""
    candidate = Path(path)
    if candidate.is_absolute():
        return {"uri": candidate.as_uri()}
    return {"uri": candidate.as_posix(), "uriBaseId": "%SRCROOT%"}


def model_line(path: str) -> int:
    """The line of ``class ModelNew`` in the candidate (1 when it cannot be read)."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError):
        return 1
    found = MODEL_CLASS.search(text)
    return text.count("\n", 0, found.start()) + 1 if found else 1


def _location(path: str, line: int) -> dict[str, Any]:
    return {
        "physicalLocation": {"artifactLocation": _artifact(path), "region": {"startLine": line}}
    }


def _rule_locations(where: list[str], fallback: str) -> list[dict[str, Any]]:
    """Each ``file:line`` a failed rule names, or the candidate's ``ModelNew``."""
    located = []
    for place in where:
        file, _, line = place.rpartition(":")
        if file and line.isdigit():
            located.append(_location(file, int(line)))
    return located or [_location(fallback, model_line(fallback))]


def counterexample_lines(counterexample: dict[str, Any] | None) -> list[str]:
    """The counterexample in a few lines: case and seed, inputs, first findings, replay."""
    if not counterexample:
        return []
    lines = [f"counterexample: case {counterexample['case']}, seed {counterexample['seed']}"]
    for number, spec in enumerate(counterexample.get("inputs", [])):
        shown = {k: spec[k] for k in ("shape", "stride", "dtype", "layout") if k in spec}
        lines.append(f"  input {number}: {json.dumps(shown)}")
    findings = counterexample.get("findings", [])
    for finding in findings[:FINDINGS_SHOWN]:
        lines.append(f"  finding: {json.dumps(finding, default=str)}")
    if len(findings) > FINDINGS_SHOWN:
        lines.append(f"  ... {len(findings) - FINDINGS_SHOWN} more in the evidence")
    lines.append(f"replay: {counterexample['replay']}")
    return lines


def failure_text(evidence: dict[str, Any]) -> str:
    """A verdict's failures for a person: the outcome, then per failed gate or rule its
    reason and counterexample with the replay command."""
    failed = evidence.get("failed_gates", []) + evidence.get("failed_rules", [])
    lines = [
        f"kernelgate verdict: {evidence['verdict']}"
        + (f" (failed: {', '.join(failed)})" if failed else ""),
        f"reference: {evidence['reference']}",
        f"candidate: {evidence['candidate']}",
    ]
    for gate in evidence.get("gates", []):
        if gate["status"] != "fail":
            continue
        lines.append(f"{gate['id']} ({gate['title']}): {gate['reason']}")
        lines.extend("  " + line for line in counterexample_lines(gate.get("counterexample")))
    for rule in evidence.get("rules", []):
        if rule["status"] == "fail":
            lines.append(f"{rule['id']}: {rule['message']} (at {', '.join(rule['where']) or '-'})")
    if evidence.get("verified_domain"):
        lines.append("verified sub-domain: " + "; ".join(evidence["verified_domain"]["changes"]))
    return "\n".join(lines)


def sarif_log(evidence: dict[str, Any], version: str = "") -> dict[str, Any]:
    """A SARIF 2.1.0 log of one verdict: one result per failed gate or rule (level error)."""
    candidate = evidence["candidate"]
    rules: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []

    def rule_index(rule_id: str, title: str, kind: str) -> int:
        for index, rule in enumerate(rules):
            if rule["id"] == rule_id:
                return index
        rules.append(
            {
                "id": rule_id,
                "name": title,
                "shortDescription": {"text": title},
                "properties": {"kind": kind},
            }
        )
        return len(rules) - 1

    for gate in evidence.get("gates", []):
        if gate["status"] != "fail":
            continue
        counterexample = gate.get("counterexample")
        text = "\n".join([f"{gate['id']}: {gate['reason']}", *counterexample_lines(counterexample)])
        results.append(
            {
                "ruleId": gate["id"],
                "ruleIndex": rule_index(gate["id"], gate["title"], gate["kind"]),
                "level": "error",
                "message": {"text": text},
                "locations": [_location(candidate, model_line(candidate))],
                "properties": {
                    "verdict": evidence["verdict"],
                    "counterexample": counterexample,
                    "replay": (counterexample or {}).get("replay"),
                },
            }
        )
    for rule in evidence.get("rules", []):
        if rule["status"] != "fail":
            continue
        results.append(
            {
                "ruleId": rule["id"],
                "ruleIndex": rule_index(rule["id"], rule["id"], "rule"),
                "level": "error",
                "message": {"text": f"{rule['id']}: {rule['message']}"},
                "locations": _rule_locations(rule.get("where", []), candidate),
                "properties": {"verdict": evidence["verdict"]},
            }
        )
    return {
        "$schema": SARIF_SCHEMA,
        "version": SARIF_VERSION,
        "runs": [
            {
                "tool": {
                    "driver": {
                        "name": "kernelgate",
                        "version": version,
                        "rules": rules,
                    }
                },
                "results": results,
                "properties": {
                    "verdict": evidence["verdict"],
                    "reference": evidence["reference"],
                    "candidate": candidate,
                    "skipped": evidence.get("skipped", []),
                },
            }
        ],
    }
