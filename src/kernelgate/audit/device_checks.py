"""The audit's view of the device-side checks of a candidate's own kernels: RES-01's
compute-sanitizer runs and RES-02's resource figures.

Both matter only for a record whose candidate launched a kernel it wrote (AUTH-01's
profile, sandbox/authorship.py: ``authored_kernels`` in the row); a PyTorch-only candidate
has nothing of its own for either to judge. So the row keeps, beside the gates:

* ``authored_kernels``: how many distinct kernels of the candidate's own the profile saw
  (None: not profiled);
* ``sanitizer``: each tool's outcome and cost (``SanitizerRun.row``), or why none ran;
* ``res02``: RES-02's status and, where it did not run, the reason's group
  (``res02_skip_group``).

and the summary gives, over the records with authored kernels, each tool's coverage
(eligible, ran, findings, total and median seconds) and RES-02's coverage (ran, and why
not on the rest, grouped). Rows from before these fields existed count as not recorded.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from typing import Any

from kernelgate.sandbox.sanitizer_outcomes import NOT_RAN, RAN, TOOLS


def authored_kernel_count(authorship: dict[str, Any] | None) -> int | None:
    """Distinct authored kernels in the verdict's authorship evidence (None: unmeasured)."""
    if not authorship or authorship.get("authored_share") is None:
        return None
    return sum(1 for k in authorship.get("kernels", []) if k.get("authored"))


def sanitizer_row(res01_evidence: dict[str, Any]) -> dict[str, Any]:
    """The row's ``sanitizer`` from RES-01's evidence: each tool's outcome, or why none ran."""
    if "sanitizer_policy" not in res01_evidence:  # a CPU audit, or --no-sanitize
        return {"not_run": "not requested (a CPU audit, or --no-sanitize)"}
    runs = res01_evidence.get("sanitizer_runs") or []
    if not runs:
        return {"not_run": str(res01_evidence.get("sanitizer", "not run"))[:300]}
    tools: dict[str, Any] = {}
    for run in runs:
        entry: dict[str, Any] = {
            "status": run.get("status") or "",
            "ran": run.get("status") in RAN,
            "errors": run.get("errors"),
            "candidate_errors": run.get("candidate_errors", 0),
            "seconds": run.get("seconds"),
        }
        if run.get("why"):
            entry["why"] = str(run["why"])[:200]
        tools[str(run.get("tool"))] = entry
    return {"tools": tools, "seconds": res01_evidence.get("sanitizer_seconds")}


# RES-02's reasons for not running, grouped: (group, pattern on the reason)
_RES02_GROUPS = (
    ("not selected (--only)", re.compile(r"not selected")),
    ("gates halted (a hang)", re.compile(r"halted|hung")),
    ("no candidate kernel seen launching", re.compile(r"no candidate kernel was seen")),
    ("cuobjdump not found", re.compile(r"cuobjdump not found")),
    ("cuobjdump failed", re.compile(r"cuobjdump")),
    ("offline compile failed", re.compile(r"offline compile|import without the interpreter")),
    ("figures missing from the launch record", re.compile(r"no n_regs")),
    ("kernel not found in the built library", re.compile(r"not found in")),
)


def res02_skip_group(reason: str) -> str:
    """The group of a RES-02 reason for not running (the summary counts groups, not texts,
    which carry kernel names and paths)."""
    for group, pattern in _RES02_GROUPS:
        if pattern.search(reason):
            return group
    return re.sub(r"\d+", "N", reason.split(":", 1)[0])[:80] or "unstated"


def res02_row(gates: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The row's ``res02``: its status and, when skipped, the reason's group."""
    gate = next((g for g in gates if g["id"] == "RES-02"), None)
    if gate is None:
        return None
    out = {"status": gate["status"]}
    if gate["status"] == "skipped":
        out["group"] = res02_skip_group(str(gate.get("reason", "")))
    return out


def _authored(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("stage") == "gates" and (r.get("authored_kernels") or 0) > 0]


def sanitizer_summary(rows: list[dict[str, Any]], settings: dict[str, Any]) -> dict[str, Any]:
    """Per tool, over the records with authored kernels: eligible, ran (to its summary),
    clean, findings, other-findings, and the records it did not run on by status, with
    total and median seconds; and records with authored kernels not sanitized, by why."""
    eligible = _authored(rows)
    per_tool: dict[str, Any] = {}
    not_sanitized: Counter[str] = Counter()
    for row in eligible:
        entry = row.get("sanitizer")
        if not entry:
            not_sanitized["not recorded (row from before the sanitizer ran in audits)"] += 1
        elif "not_run" in entry:
            not_sanitized[re.sub(r"\d+", "N", entry["not_run"])[:120]] += 1
    for tool in TOOLS:
        runs = [
            r["sanitizer"]["tools"][tool]
            for r in eligible
            if (r.get("sanitizer") or {}).get("tools", {}).get(tool)
        ]
        if not runs and not eligible:
            continue
        seconds = [float(t["seconds"]) for t in runs if t.get("seconds") is not None]
        statuses = Counter(t["status"] for t in runs)
        per_tool[tool] = {
            "eligible": len(eligible),
            "ran": sum(statuses[s] for s in RAN),
            "clean": statuses["clean"],
            "findings": statuses["findings"],
            "other_findings": statuses["other-findings"],
            "did_not_run": {s: statuses[s] for s in NOT_RAN if statuses[s]},
            "total_s": round(sum(seconds), 1) if seconds else None,
            "median_s": round(statistics.median(seconds), 2) if seconds else None,
        }
    return {
        "setting": settings.get("sanitize"),
        "records_with_authored_kernels": len(eligible),
        "tools": per_tool,
        "not_sanitized": dict(not_sanitized.most_common()),
    }


def res02_coverage(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Over the records with authored kernels: where RES-02 ran (pass or fail), and why not
    on the rest (grouped)."""
    eligible = _authored(rows)
    ran = 0
    why: Counter[str] = Counter()
    for row in eligible:
        entry = row.get("res02") or res02_row(row.get("gates", []))
        if entry is None:
            why["RES-02 absent from the row"] += 1
        elif entry["status"] in ("pass", "fail"):
            ran += 1
        else:
            why[entry.get("group") or res02_skip_group("")] += 1
    return {
        "records_with_authored_kernels": len(eligible),
        "ran": ran,
        "rate": round(ran / len(eligible), 4) if eligible else None,
        "did_not_run": dict(why.most_common()),
    }


def sanitizer_table(summary: dict[str, Any]) -> list[list[str]]:
    """The report's sanitizer table: one row per tool."""
    s = summary.get("sanitizers") or {}
    rows = []
    for tool, t in (s.get("tools") or {}).items():
        missed = ", ".join(f"{k} {v}" for k, v in t["did_not_run"].items()) or "-"
        rows.append(
            [
                tool,
                str(t["eligible"]),
                str(t["ran"]),
                str(t["findings"]),
                str(t["other_findings"]),
                missed,
                "-" if t["total_s"] is None else f"{t['total_s']:.0f}",
                "-" if t["median_s"] is None else f"{t['median_s']:.1f}",
            ]
        )
    for why, count in (s.get("not_sanitized") or {}).items():
        rows.append(["no tool ran", str(count), "0", "-", "-", why, "-", "-"])
    return rows or [["-", "0", "0", "0", "0", str(s.get("setting") or "off"), "-", "-"]]


SANITIZER_HEADER = [
    "tool",
    "eligible (authored kernels)",
    "ran",
    "findings (candidate's kernels)",
    "errors only outside them",
    "did not run",
    "total s",
    "median s",
]


def res02_table(summary: dict[str, Any]) -> list[list[str]]:
    """The report's RES-02 coverage table: the totals, then each reason group."""
    c = summary.get("res02_coverage") or res02_coverage([])
    rate = "-" if c["rate"] is None else f"{100 * c['rate']:.1f}%"
    rows = [
        ["records with authored kernels", str(c["records_with_authored_kernels"])],
        ["RES-02 ran (pass or fail)", f"{c['ran']} ({rate})"],
    ]
    rows += [[f"did not run: {why}", str(n)] for why, n in c["did_not_run"].items()]
    return rows
