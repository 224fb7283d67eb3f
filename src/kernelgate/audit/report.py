"""The audit's report: ``summary.json``, ``report.md``, a self-contained ``report.html``, plots.

Everything is computed from the store's rows, so a report can be rebuilt at any time, and a
resumed audit's report covers every record judged in any session.

Definitions the figures rest on:

- The old check *accepts* a record when it says ``accepted`` (KernelBench's check at the
  legacy 1e-2 tolerance; ``old_check_current`` holds today's per-dtype tolerance). The
  disagreement matrix crosses it with the contract's three outcomes, ``verified``,
  ``narrowed`` and ``rejected``, each its own column: a narrowed record holds only on a
  smaller domain than the benchmark claimed, so it is never counted as accepted. Records
  the old check could not run, and records that are ``unreadable`` or ``error``, are left
  out of the matrix and counted as excluded.
- The two headline rates (``headline``), over records that loaded: *any gate fails* and
  *any tolerance-free gate fails*. A narrowed record counts where its gate failed (the
  layout or shape gate that narrowed it), like any other failure.
- A record's *defects* are its failed gates, or ``load`` when its candidate does not load
  (syntax error, no ``ModelNew``, import failure). The modal defect is the most frequent.
- Compile pass: the candidate loaded and ``ModelNew`` was built. Dynamic pass: no dynamic
  differential gate (CMP-*, ORD-01, PRC-*) failed, among records that loaded and ran one.
  Safety coverage: per safety gate, the share of loaded records on which it ran (pass or
  fail, not skipped).
- An *unguarded precondition*: a record whose kernel faulted (a misaligned or illegal
  address) only on layouts the reference never sends, and was narrowed around the fault
  (``unguarded_precondition`` in its row, with the fault and the layouts; domain.py).
- A *partial* audit (``kernelgate audit --only``) ran only the selected gates on every
  record: ``only`` in the summary and in each row names them, and the report says so in its
  first lines, so that its verdicts are never taken for the whole contract's.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
import re
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from kernelgate.audit.device_checks import (
    SANITIZER_HEADER,
    res02_coverage,
    res02_table,
    sanitizer_summary,
    sanitizer_table,
)
from kernelgate.audit.integrity import check_evidence, refuse_changed
from kernelgate.audit.oldcheck import ACCEPTED, REJECTED
from kernelgate.evidence_io import write_atomic

CONTRACT_OUTCOMES = ("verified", "narrowed", "rejected", "unreadable", "error")
MATRIX_COLUMNS = ("verified", "narrowed", "rejected")  # the disagreement matrix's columns
OLD_CHECK_OUTCOMES = ("accepted", "rejected", "not-run", "error")
DYNAMIC_GATES = ("CMP-01", "CMP-02", "CMP-03", "ORD-01", "PRC-01", "PRC-02")
SAFETY_GATES = ("EXC-01", "EXC-02", "ORD-02", "MEM-01", "RES-01", "RES-02")
SUMMARY_SCHEMA = "kernelgate.audit-summary/1"
PLOTS = {
    "verdicts": "Outcomes: old check vs contract",
    "gate_failures": "Failure rate per gate",
    "disagreement": "Disagreement matrix",
    "verification_time": "Verification time per kernel",
}


# -- figures ---------------------------------------------------------------------------------


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _percentile(values: list[float], share: float) -> float | None:
    """Nearest-rank percentile (no interpolation: every reported time was measured)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _old_accepts(status: str) -> bool | None:
    return {ACCEPTED: True, REJECTED: False}.get(status)


def disagreement_matrix(rows: list[dict[str, Any]], field: str) -> dict[str, int]:
    """Old check (accepts, rejects) by contract outcome (``MATRIX_COLUMNS``), plus the
    records left out (``excluded``): cells ``old_<accepts|rejects>_contract_<outcome>``.

    Public because ``combine.py`` crosses the rows of several audits' summaries with it:
    one rule for the matrix, whether it covers one corpus or five. ``rows`` need only
    ``verdict`` and ``field`` (a store row's or a summary row's)."""
    cells = Counter()
    for row in rows:
        old, new = _old_accepts(row[field]), row["verdict"]
        if old is None or new not in MATRIX_COLUMNS:
            cells["excluded"] += 1
        else:
            cells[f"old_{'accepts' if old else 'rejects'}_contract_{new}"] += 1
    keys = [f"old_{o}_contract_{c}" for o in ("accepts", "rejects") for c in MATRIX_COLUMNS]
    return {key: cells[key] for key in [*keys, "excluded"]}


def headline(loaded: list[dict[str, Any]]) -> dict[str, Any]:
    """The seed's two headline rates over records that loaded: any gate fails, any
    tolerance-free gate fails. Narrowed records count where their gate failed; how many of
    the failing records are narrowed is given beside each count."""
    failing = [r for r in loaded if any(g["status"] == "fail" for g in r["gates"])]
    exact = [
        r
        for r in failing
        if any(g["status"] == "fail" and g["kind"] == "tolerance-free" for g in r["gates"])
    ]
    return {
        "loaded": len(loaded),
        "any_gate_fails": len(failing),
        "any_gate_fails_rate": _rate(len(failing), len(loaded)),
        "any_gate_fails_narrowed": sum(1 for r in failing if r["verdict"] == "narrowed"),
        "any_tolerance_free_gate_fails": len(exact),
        "any_tolerance_free_gate_fails_rate": _rate(len(exact), len(loaded)),
        "any_tolerance_free_gate_fails_narrowed": sum(
            1 for r in exact if r["verdict"] == "narrowed"
        ),
    }


def defects(row: dict[str, Any]) -> list[str]:
    """Why the contract rejected a record: its failed gates and rules, or ``load``."""
    if row["verdict"] != "rejected":
        return []
    failed = list(row["failed_gates"]) + list(row.get("failed_rules", []))
    return failed or ([row["stage"]] if row.get("stage") else ["other"])


def throughput(runs: list[dict[str, Any]], records: int) -> dict[str, Any]:
    """Judged records per hour of audit wall time, over the runs the store recorded.

    A run's wall time is from its start to the later of its last row and its last heartbeat
    (a run killed at a deadline has no end of its own; one that judged nothing still took its
    time); rows of stores older than the run log are not covered.

    Rows reused from another judging of the same pair (``reuse.py``) cost a run next to
    nothing: ``judged_per_hour`` counts judged rows only, and ``rows_per_hour_with_reused``,
    all rows, is given apart so that the two are never taken for each other.
    """
    timed = [r for r in runs if _run_end(r) is not None]
    hours = sum(max(_run_end(r) - r["started"], 0.0) for r in timed) / 3600
    judged = sum(r["judged"] for r in timed)
    reused = sum(r.get("reused", 0) for r in timed)
    return {
        "runs": len(runs),
        "judged_in_timed_runs": judged,
        "reused_in_timed_runs": reused,
        "rows_in_timed_runs": sum(r["rows"] for r in timed),
        "rows_without_run": records - sum(r["rows"] for r in runs),
        "wall_hours": round(hours, 4),
        "judged_per_hour": round(judged / hours, 1) if hours else None,
        "rows_per_hour_with_reused": round((judged + reused) / hours, 1) if hours else None,
        "per_run": [
            {
                "run": r["run"],
                "workers": r.get("workers"),
                "judged": r["judged"],
                "reused": r.get("reused", 0),
                "wall_s": round(_run_end(r) - r["started"], 1) if _run_end(r) else None,
            }
            for r in runs
        ],
    }


def _run_end(run: dict[str, Any]) -> float | None:
    """When a run was last known alive: its last row or heartbeat (None: neither)."""
    ends = [t for t in (run.get("last_row"), run.get("last_seen")) if t]
    return max(ends) if ends else None


def summarize(
    rows: list[dict[str, Any]],
    settings: dict[str, Any],
    runs: list[dict[str, Any]] = (),
    corpus_ids: list[str] | None = None,
) -> dict[str, Any]:
    """Every figure of the report, as JSON-ready data (also written as summary.json).

    Paths into the audit folder's records/ are given relative to the folder (``_local_paths``).
    ``corpus_ids`` (every record of the corpus) makes an unfinished audit say so: the figures
    are over the records with a row, and ``without_row`` names the others.
    """
    local = _local_paths
    loaded = [r for r in rows if r.get("stage") == "gates"]
    attempted = [
        r for r in rows if r["verdict"] not in ("unreadable",) and r.get("stage") != "reference"
    ]
    gate_stats: dict[str, dict[str, Any]] = {}
    for row in loaded:
        for gate in row["gates"]:
            stats = gate_stats.setdefault(
                gate["id"], {"kind": gate["kind"], "pass": 0, "fail": 0, "skipped": 0}
            )
            stats[{"pass": "pass", "fail": "fail"}.get(gate["status"], "skipped")] += 1
            if gate.get("seconds") is not None and gate["status"] != "skipped":
                stats.setdefault("_seconds", []).append(float(gate["seconds"]))
    for stats in gate_stats.values():
        stats["failure_rate"] = _rate(stats["fail"], stats["pass"] + stats["fail"])
        # where an audit's judging time goes (rows from before gate times were kept: None)
        spent = stats.pop("_seconds", [])
        stats["median_s"] = round(statistics.median(spent), 3) if spent else None
        stats["total_s"] = round(sum(spent), 1) if spent else None

    kinds = Counter()
    for row in loaded:
        failed_kinds = {g["kind"] for g in row["gates"] if g["status"] == "fail"}
        exact, thresholded = "tolerance-free" in failed_kinds, "thresholded" in failed_kinds
        kinds["any_tolerance_free_failure"] += exact
        kinds["any_thresholded_failure"] += thresholded
        kinds["only_tolerance_free"] += exact and not thresholded
        kinds["only_thresholded"] += thresholded and not exact
        kinds["both"] += exact and thresholded

    defect_counts = Counter(d for row in rows for d in defects(row))
    rejected = sum(1 for row in rows if row["verdict"] == "rejected")
    modal = defect_counts.most_common(1)

    dynamic_ran = [
        r
        for r in loaded
        if any(g["id"] in DYNAMIC_GATES and g["status"] != "skipped" for g in r["gates"])
    ]
    dynamic_pass = [
        r for r in dynamic_ran if not any(g in DYNAMIC_GATES for g in r["failed_gates"])
    ]
    present = {g["id"] for r in loaded for g in r["gates"]}
    safety_coverage = {  # None: this kernelgate has no such gate yet (absent, not skipped)
        gate: None
        if gate not in present
        else _rate(
            sum(
                1
                for r in loaded
                if any(g["id"] == gate and g["status"] != "skipped" for g in r["gates"])
            ),
            len(loaded),
        )
        for gate in SAFETY_GATES
    }
    safety_pass = [r for r in loaded if not any(g in SAFETY_GATES for g in r["failed_gates"])]

    seconds = [float(r["seconds"]) for r in rows if r["verdict"] != "unreadable" and r["seconds"]]
    verify_seconds = [float(r["verify_seconds"]) for r in loaded if r.get("verify_seconds")]
    contracts = [r["contract"] for r in loaded if r.get("contract")]
    coverage = {
        "records_with_contract": len(contracts),
        "dtypes": dict(Counter(d for c in contracts for d in c["dtypes"])),
        "layouts": dict(Counter(lay for c in contracts for lay in c["layouts"])),
        "devices": dict(Counter(str(c["device"]) for c in contracts)),
        "triton_interpreter": sum(1 for c in contracts if c.get("triton_interpreter")),
        "varying_dims_per_contract": dict(
            sorted(Counter(str(len(c["varying_dims"])) for c in contracts).items())
        ),
        "fixed_dims_total": sum(len(c["fixed_dims"]) for c in contracts),
        "input_ranks": dict(
            sorted(Counter(str(len(s)) for c in contracts for s in c["shapes"]).items())
        ),
    }
    old_compiled = [r for r in rows if r["old_check_detail"].get("compiled") is not None]
    unguarded = [r for r in rows if r.get("unguarded_precondition")]
    static = static_summary(rows)
    authorship = authorship_summary(rows)
    return {
        "schema": SUMMARY_SCHEMA,
        "settings": settings,
        # the gates every record ran (--only); None: all of them, a full audit
        "only": settings.get("only"),
        "partial": bool(settings.get("only")),
        "records": len(rows),
        "corpus_records": len(corpus_ids) if corpus_ids is not None else None,
        "without_row": _without_row(rows, corpus_ids),
        "old_check": {k: sum(1 for r in rows if r["old_check"] == k) for k in OLD_CHECK_OUTCOMES},
        "old_check_current_tolerance": {
            k: sum(1 for r in rows if r["old_check_current"] == k) for k in OLD_CHECK_OUTCOMES
        },
        "contract": {k: sum(1 for r in rows if r["verdict"] == k) for k in CONTRACT_OUTCOMES},
        "disagreement": disagreement_matrix(rows, "old_check"),
        "disagreement_current_tolerance": disagreement_matrix(rows, "old_check_current"),
        "headline": headline(loaded),
        "gates": dict(sorted(gate_stats.items())),
        "tolerance_free_vs_thresholded": {"judged": len(loaded), **kinds},
        "modal_defect": {
            "defect": modal[0][0] if modal else None,
            "records": modal[0][1] if modal else 0,
            "share_of_rejected": _rate(modal[0][1], rejected) if modal else None,
            "all": dict(defect_counts.most_common()),
        },
        "compile": {
            "attempted": len(attempted),
            "loaded": len(loaded),
            "rate": _rate(len(loaded), len(attempted)),
            "old_check_compiled": sum(1 for r in old_compiled if r["old_check_detail"]["compiled"]),
            "old_check_attempted": len(old_compiled),
        },
        "dynamic": {
            "judged": len(dynamic_ran),
            "passed": len(dynamic_pass),
            "rate": _rate(len(dynamic_pass), len(dynamic_ran)),
        },
        "safety": {
            "judged": len(loaded),
            "passed": len(safety_pass),
            "rate": _rate(len(safety_pass), len(loaded)),
            "coverage": safety_coverage,
        },
        "time": {
            "records": len(seconds),
            "median_s": statistics.median(seconds) if seconds else None,
            "p95_s": _percentile(seconds, 0.95),
            "verify_median_s": statistics.median(verify_seconds) if verify_seconds else None,
            "verify_p95_s": _percentile(verify_seconds, 0.95),
        },
        "throughput": throughput(list(runs), len(rows)),
        "reused": reused_summary(rows),
        # records narrowed (or, judged strictly, rejected) around a fault they do not guard
        "unguarded_precondition": {
            "records": len(unguarded),
            "by_verdict": dict(Counter(r["verdict"] for r in unguarded)),
        },
        "coverage": coverage,
        "static": static,
        "authorship": authorship,
        # the device checks of the candidate's own kernels (audit/device_checks.py)
        "sanitizers": sanitizer_summary(rows, settings),
        "res02_coverage": res02_coverage(rows),
        # which kernelgate source (audit.judge.code_digest) judged how many rows; rows of
        # stores written before the digest was recorded count as "unrecorded"
        "judged_with": dict(Counter(str(r.get("judged_with", "unrecorded")) for r in rows)),
        # the versions and device that judged the rows (identity.judging_environment), so a
        # combined report (combine.py) can say what each audit ran on
        "environments": environments(rows),
        "rows": [
            {
                "id": r["id"],
                "source_ids": r["source_ids"],
                "source_verdict": r["source_verdict"],
                "old_check": r["old_check"],
                "old_check_current": r["old_check_current"],
                "verdict": r["verdict"],
                "stage": r.get("stage"),
                "only": r.get("only", settings.get("only")),
                "failed_gates": r["failed_gates"],
                "failed_rules": r.get("failed_rules", []),
                "unguarded_precondition": r.get("unguarded_precondition", []),
                "authored_share": r.get("authored_share"),
                "failed_builds": r.get("failed_builds", []),
                "reason": local(r.get("reason")),
                "seconds": r["seconds"],
                "replay": local(r.get("replay")),
                "gate_replays": {
                    g["id"]: local(g["replay"]) for g in r["gates"] if g.get("replay")
                },
                "gate_reasons": {
                    g["id"]: local(g.get("reason")) for g in r["gates"] if g.get("status") == "fail"
                },
                "evidence": local(r.get("evidence")),
                "reused_from": r.get("reused_from"),
                # the bytes judged (identity.inputs_digest): which records share a
                # (reference, candidate) pair, across audits too (combine.py)
                "inputs_sha256": r.get("inputs_sha256"),
            }
            for r in rows
        ],
    }


def environments(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each environment the rows were judged in (torch, Triton, CUDA, device, GPU), with its
    row count, most rows first; rows that record none (older stores) are not counted."""
    counts = Counter(
        json.dumps(r["environment"], sort_keys=True)
        for r in rows
        if isinstance(r.get("environment"), dict)
    )
    return [{"environment": json.loads(env), "rows": n} for env, n in counts.most_common()]


def reused_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How many rows were reused from another judging of the same pair, and from which
    audits (``reuse.py``); ``judged`` is the rows judged in this audit's own runs."""
    origins = Counter(
        (str(r["reused_from"].get("audit")), r["reused_from"].get("source"))
        for r in rows
        if r.get("reused_from")
    )
    reused = sum(origins.values())
    return {
        "rows": reused,
        "judged": sum(1 for r in rows if r["verdict"] != "unreadable") - reused,
        "from": [
            {"audit": audit, "source": source, "rows": count}
            for (audit, source), count in origins.most_common()
        ],
    }


def reused_text(summary: dict[str, Any]) -> str | None:
    """The report's line on reused rows (None: none was reused)."""
    reused = summary.get("reused") or {}
    if not reused.get("rows"):
        return None
    origins = ", ".join(
        f"{o['rows']} from {o.get('source') or Path(str(o['audit'])).name}" for o in reused["from"]
    )
    return (
        f"Reused: {reused['rows']} row(s) were not judged in this audit but copied from an "
        f"earlier judging of the same pair, with the same settings, code and environment "
        f"({origins}); {reused['judged']} row(s) were judged here. The reused rows are listed "
        "under 'Reused verdicts'."
    )


# A record's work folder (audit.judge.work_folder_name) wherever the store was written: the
# part of a path before it is that machine's own.
_WORK_FOLDER_PATH = re.compile(r"[^\s'\"]*/(?=records/[A-Za-z0-9._-]+-[0-9a-f]{8}/)")


def _local_paths(text: str | None) -> str | None:
    """``text`` with paths into the audit folder's records/ made relative to the folder, so
    replay commands work wherever the folder was carried (run them from it)."""
    return _WORK_FOLDER_PATH.sub("", text) if isinstance(text, str) else text


# -- plots -----------------------------------------------------------------------------------


def _plots(summary: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, bytes]:
    """PNG bytes per plot name; empty when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    images: dict[str, bytes] = {}

    def save(name: str, figure: Any) -> None:
        images[name] = png_bytes(plt, figure)

    figure, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for ax, key, title in (
        (axes[0], "old_check", "old check (KernelBench, 1e-2)"),
        (axes[1], "contract", "contract (kernelgate)"),
    ):
        counts = summary[key]
        ax.bar(list(counts), list(counts.values()), color="#4c72b0")
        ax.set_title(title)
        ax.tick_params(axis="x", rotation=30)
    save("verdicts", figure)

    gates = summary["gates"]
    figure, ax = plt.subplots(figsize=(7, 0.45 * max(len(gates), 2) + 1))
    names = list(gates)
    rates = [(gates[g]["failure_rate"] or 0.0) * 100 for g in names]
    colors = ["#c44e52" if gates[g]["kind"] == "tolerance-free" else "#dd8452" for g in names]
    ax.barh(names, rates, color=colors)
    ax.set_xlabel("% of loaded records failing (red: tolerance-free, orange: thresholded)")
    ax.set_xlim(0, 100)
    ax.invert_yaxis()
    save("gate_failures", figure)

    save("disagreement", disagreement_figure(plt, summary["disagreement"]))

    seconds = [float(r["seconds"]) for r in rows if r["verdict"] != "unreadable" and r["seconds"]]
    figure, ax = plt.subplots(figsize=(6, 3))
    ax.hist(seconds or [0.0], bins=min(30, max(5, len(seconds))), color="#55a868")
    ax.set_xlabel("seconds per record (old check + contract)")
    ax.set_ylabel("records")
    save("verification_time", figure)
    return images


def disagreement_figure(plt: Any, matrix: dict[str, int], title: str | None = None) -> Any:
    """The disagreement matrix as a heat map (``plt``: matplotlib.pyplot, Agg backend).
    Shared with the combined report (``combine.py``), so the two plots read alike."""
    cells = [
        [matrix[f"old_{old}_contract_{new}"] for new in MATRIX_COLUMNS]
        for old in ("accepts", "rejects")
    ]
    figure, ax = plt.subplots(figsize=(5.6, 3.8))
    ax.imshow(cells, cmap="Blues")
    ax.set_xticks(range(len(MATRIX_COLUMNS)), [f"contract {c}" for c in MATRIX_COLUMNS])
    ax.set_yticks([0, 1], ["old accepts", "old rejects"])
    for i in range(2):
        for j in range(len(MATRIX_COLUMNS)):
            ax.text(j, i, str(cells[i][j]), ha="center", va="center", fontsize=14)
    ax.set_title((f"{title}; " if title else "") + f"excluded: {matrix['excluded']}")
    return figure


def png_bytes(plt: Any, figure: Any) -> bytes:
    """``figure`` as PNG bytes, closed afterwards (one figure's memory, not every plot's)."""
    buffer = io.BytesIO()
    figure.tight_layout()
    figure.savefig(buffer, format="png", dpi=110)
    plt.close(figure)
    return buffer.getvalue()


# -- documents -------------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def static_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per rule id: records with a static finding of it, findings in all, records it failed.
    Rows of stores written before the static layer carry none (counted in ``rows_without``).
    """
    judged = [r for r in rows if "static_findings" in r and r.get("stage") == "gates"]
    records: Counter[str] = Counter()
    findings: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    for row in judged:
        findings.update(row["static_findings"])
        records.update(set(row["static_findings"]))
        failed.update(row.get("failed_rules", []))
    ids = sorted(set(records) | set(failed))
    return {
        "judged": len(judged),
        "rows_without": sum(1 for r in rows if r.get("stage") == "gates") - len(judged),
        "rules": {
            rule: {"records": records[rule], "findings": findings[rule], "failed": failed[rule]}
            for rule in ids
        },
    }


AUTHORED_SHARE_BINS = 10  # the histogram's bins over [0, 1]


def authorship_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The authored share of device time over the records whose gates ran: a histogram
    (tenths, the last bin closed), how many were not measured, and AUTH-01's failures."""
    judged = [r for r in rows if r.get("stage") == "gates"]
    shares = [float(r["authored_share"]) for r in judged if r.get("authored_share") is not None]
    bins = [0] * AUTHORED_SHARE_BINS
    for share in shares:
        bins[min(int(share * AUTHORED_SHARE_BINS), AUTHORED_SHARE_BINS - 1)] += 1
    width = 1 / AUTHORED_SHARE_BINS
    return {
        "measured": len(shares),
        "not_measured": len(judged) - len(shares),
        "histogram": {
            f"{i * width:.1f}-{(i + 1) * width:.1f}": count for i, count in enumerate(bins)
        },
        "median": statistics.median(shares) if shares else None,
        "below_half": sum(1 for s in shares if s < 0.5),
        "auth01_failed": sum(1 for r in judged if "AUTH-01" in r.get("failed_rules", [])),
        # why a share is 0 so often in corpora of generated code: the extension did not
        # compile here and the candidate fell back to PyTorch (rows carry the first error)
        "failed_build": sum(1 for r in judged if r.get("failed_builds")),
        "auth01_failed_after_failed_build": sum(
            1 for r in judged if r.get("failed_builds") and "AUTH-01" in r.get("failed_rules", [])
        ),
    }


def authorship_rows(summary: dict[str, Any]) -> list[list[str]]:
    """The authorship table's rows: each bin of the histogram, then the totals."""
    a = summary.get("authorship") or authorship_summary([])
    rows = [[f"share {k}", str(v)] for k, v in a["histogram"].items()]
    return [
        *rows,
        ["measured", str(a["measured"])],
        ["not measured (no profiled call)", str(a["not_measured"])],
        ["median share", _pct(a["median"])],
        ["below 50%", str(a["below_half"])],
        ["rejected by AUTH-01", str(a["auth01_failed"])],
        ["an extension build failed", str(a.get("failed_build", 0))],
        [
            "rejected by AUTH-01 after a failed build (fell back to PyTorch)",
            str(a.get("auth01_failed_after_failed_build", 0)),
        ],
    ]


def static_rows(summary: dict[str, Any]) -> list[list[str]]:
    """The static table's rows: rule, records flagged, findings, records it rejected."""
    return [
        [rule, str(c["records"]), str(c["findings"]), str(c["failed"])]
        for rule, c in summary.get("static", {}).get("rules", {}).items()
    ] or [["-", "0", "0", "0"]]


Table = tuple[str, list[str], list[list[str]]]  # (title, header, rows) of one table


def disagreement_table(matrix: dict[str, int], current: dict[str, int] | None) -> Table:
    """The disagreement matrix as a table: the old check at 1e-2, today's per-dtype tolerance
    in brackets (left out where ``current`` is None). Shared with the combined report
    (``combine.py``), so that one audit's matrix and five audits' read the same."""

    def cell(old: str, outcome: str) -> str:
        key = f"old_{old}_contract_{outcome}"
        return f"{matrix[key]} ({current[key]})" if current is not None else str(matrix[key])

    title = "Disagreement matrix (old check at 1e-2" + (
        "; per-dtype tolerance in brackets)" if current is not None else ")"
    )
    return (
        title,
        ["", *[f"contract {c}" for c in MATRIX_COLUMNS]],
        [
            *[
                [f"old check {old}", *[cell(old, c) for c in MATRIX_COLUMNS]]
                for old in ("accepts", "rejects")
            ],
            ["excluded (not run, unreadable, error)", str(matrix["excluded"]), "", ""],
        ],
    )


def headline_cells(head: dict[str, Any]) -> list[str]:
    """``headline``'s figures as one table row: loaded, any gate fails, any tolerance-free
    gate fails (each with its rate and how many of those records are narrowed)."""
    return [
        str(head["loaded"]),
        f"{head['any_gate_fails']} ({_pct(head['any_gate_fails_rate'])}; "
        f"{head['any_gate_fails_narrowed']} narrowed)",
        f"{head['any_tolerance_free_gate_fails']} "
        f"({_pct(head['any_tolerance_free_gate_fails_rate'])}; "
        f"{head['any_tolerance_free_gate_fails_narrowed']} narrowed)",
    ]


HEADLINE_HEADER = ["loaded", "any gate fails", "any tolerance-free gate fails"]


def headline_table(head: dict[str, Any]) -> Table:
    """The two headline rates as a table (shared with the combined report)."""
    return (
        "Headline rates (records that loaded; narrowed records count where their gate failed)",
        HEADLINE_HEADER,
        [headline_cells(head)],
    )


def _sections(summary: dict[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of every table, shared by the Markdown and HTML documents."""
    m = summary["disagreement"]
    mc = summary["disagreement_current_tolerance"]
    tol = summary["tolerance_free_vs_thresholded"]
    head = summary["headline"]
    cov = summary["coverage"]
    tables = [
        (
            "Outcomes",
            ["", *CONTRACT_OUTCOMES],
            [["contract", *[str(summary["contract"][k]) for k in CONTRACT_OUTCOMES]]],
        ),
        (
            "Old check (KernelBench, re-run here)",
            ["tolerance", *OLD_CHECK_OUTCOMES],
            [
                ["1e-2 (older runs)", *[str(summary["old_check"][k]) for k in OLD_CHECK_OUTCOMES]],
                [
                    "per dtype (today)",
                    *[str(summary["old_check_current_tolerance"][k]) for k in OLD_CHECK_OUTCOMES],
                ],
            ],
        ),
        disagreement_table(m, mc),
        headline_table(head),
        (
            "Per-gate failure rates and time (records that loaded)",
            ["gate", "kind", "pass", "fail", "skipped", "failure rate", "median s", "total s"],
            [
                [
                    g,
                    s["kind"],
                    str(s["pass"]),
                    str(s["fail"]),
                    str(s["skipped"]),
                    _pct(s["failure_rate"]),
                    _seconds(s.get("median_s")),
                    _seconds(s.get("total_s")),
                ]
                for g, s in summary["gates"].items()
            ],
        ),
        (
            "Tolerance-free vs thresholded failures",
            [
                "judged",
                "any tolerance-free",
                "any thresholded",
                "only tolerance-free",
                "only thresholded",
                "both",
            ],
            [
                [
                    str(tol["judged"]),
                    *[
                        str(tol.get(k, 0))
                        for k in (
                            "any_tolerance_free_failure",
                            "any_thresholded_failure",
                            "only_tolerance_free",
                            "only_thresholded",
                            "both",
                        )
                    ],
                ]
            ],
        ),
        (
            "Pass rates",
            ["measure", "passed / judged", "rate"],
            [
                [
                    "compile (candidate loads, ModelNew builds)",
                    f"{summary['compile']['loaded']} / {summary['compile']['attempted']}",
                    _pct(summary["compile"]["rate"]),
                ],
                [
                    "old check compiled",
                    f"{summary['compile']['old_check_compiled']} / "
                    f"{summary['compile']['old_check_attempted']}",
                    _pct(
                        _rate(
                            summary["compile"]["old_check_compiled"],
                            summary["compile"]["old_check_attempted"],
                        )
                    ),
                ],
                [
                    "dynamic differential gates",
                    f"{summary['dynamic']['passed']} / {summary['dynamic']['judged']}",
                    _pct(summary["dynamic"]["rate"]),
                ],
                [
                    "safety gates",
                    f"{summary['safety']['passed']} / {summary['safety']['judged']}",
                    _pct(summary["safety"]["rate"]),
                ],
            ],
        ),
        (
            "Safety-gate coverage (share of loaded records on which the gate ran)",
            ["gate", "coverage"],
            [
                [g, "not implemented in this kernelgate" if v is None else _pct(v)]
                for g, v in summary["safety"]["coverage"].items()
            ],
        ),
        (
            "Modal defect",
            ["defect", "records", "share of rejected", "all defects"],
            [
                [
                    _fmt(summary["modal_defect"]["defect"]),
                    str(summary["modal_defect"]["records"]),
                    _pct(summary["modal_defect"]["share_of_rejected"]),
                    ", ".join(f"{k}: {v}" for k, v in summary["modal_defect"]["all"].items())
                    or "-",
                ]
            ],
        ),
        (
            "Verification time per kernel (seconds)",
            ["", "median", "p95"],
            [
                [
                    "whole record (old check + contract)",
                    _fmt(summary["time"]["median_s"]),
                    _fmt(summary["time"]["p95_s"]),
                ],
                [
                    "contract verification",
                    _fmt(summary["time"]["verify_median_s"]),
                    _fmt(summary["time"]["verify_p95_s"]),
                ],
            ],
        ),
        (
            "Throughput (judged records per hour of audit wall time; reused rows not counted)",
            [
                "runs",
                "judged",
                "reused",
                "wall hours",
                "judged per hour",
                "rows per hour counting reused (not throughput)",
                "rows from before the run log",
            ],
            [
                [
                    str(summary["throughput"]["runs"]),
                    str(summary["throughput"]["judged_in_timed_runs"]),
                    str(summary["throughput"].get("reused_in_timed_runs", 0)),
                    _fmt(summary["throughput"]["wall_hours"]),
                    _fmt(summary["throughput"]["judged_per_hour"]),
                    _fmt(summary["throughput"].get("rows_per_hour_with_reused")),
                    str(summary["throughput"]["rows_without_run"]),
                ]
            ],
        ),
        (
            "Contract coverage",
            ["aspect", "counts"],
            [
                ["contracts", str(cov["records_with_contract"])],
                ["dtypes", ", ".join(f"{k}: {v}" for k, v in cov["dtypes"].items()) or "-"],
                ["layouts", ", ".join(f"{k}: {v}" for k, v in cov["layouts"].items()) or "-"],
                ["devices", ", ".join(f"{k}: {v}" for k, v in cov["devices"].items()) or "-"],
                ["Triton interpreter stood in for the device", str(cov["triton_interpreter"])],
                [
                    "shapes: varying dims per contract",
                    ", ".join(f"{k} dims: {v}" for k, v in cov["varying_dims_per_contract"].items())
                    or "-",
                ],
                [
                    "shapes: input ranks",
                    ", ".join(f"rank {k}: {v}" for k, v in cov["input_ranks"].items()) or "-",
                ],
                ["shapes: dims held fixed (in all contracts)", str(cov["fixed_dims_total"])],
            ],
        ),
        (
            "Static flags and rule failures (docs/rules.md; over "
            f"{summary.get('static', {}).get('judged', 0)} judged records)",
            ["rule", "records flagged", "findings", "records rejected by the rule"],
            static_rows(summary),
        ),
        (
            "Unguarded preconditions (faults only on layouts the reference never sends)",
            ["record", "verdict", "fault and layouts"],
            [
                [row["id"], row["verdict"], _one_line("; ".join(row["unguarded_precondition"]))]
                for row in summary["rows"]
                if row.get("unguarded_precondition")
            ]
            or [["-", "-", "none"]],
        ),
        (
            "Authored share of device time (AUTH-01; docs/rules.md)",
            ["records", "count"],
            authorship_rows(summary),
        ),
        (
            "compute-sanitizer (RES-01) on records with authored kernels",
            SANITIZER_HEADER,
            sanitizer_table(summary),
        ),
        ("RES-02 coverage (records with authored kernels)", ["", "records"], res02_table(summary)),
        (
            "Judged with (kernelgate source digest)",
            ["digest", "rows"],
            [[k, str(v)] for k, v in summary.get("judged_with", {}).items()],
        ),
        (
            "Reused verdicts (copied from an earlier judging of the same pair, not judged here)",
            ["record", "verdict", "reused from (audit)", "record there"],
            [
                [
                    row["id"],
                    row["verdict"],
                    str(row["reused_from"].get("source") or row["reused_from"].get("audit")),
                    str(row["reused_from"].get("id")),
                ]
                for row in summary["rows"]
                if row.get("reused_from")
            ]
            or [["-", "-", "none", "-"]],
        ),
    ]
    return tables


def _rejected_entries(
    summary: dict[str, Any],
) -> list[tuple[str, str, list[tuple[str, str, str | None]]]]:
    """(id, headline, [(gate or stage, why, replay command)]) for every rejected record."""
    entries = []
    for row in summary["rows"]:
        if row["verdict"] != "rejected":
            continue
        rules = row.get("failed_rules", [])
        if row["failed_gates"] or rules:
            what = "failed " + ", ".join(row["failed_gates"] + rules)
            reasons = row.get("gate_reasons") or {}
            failures = [
                (g, reasons.get(g) or "", row["gate_replays"].get(g) or row["replay"])
                for g in row["failed_gates"]
            ] + [
                (rule, "a rule beside the gates (evidence: rules)", row["replay"]) for rule in rules
            ]
        else:
            stage = row["stage"] or "load"
            what = f"rejected at {stage}"
            failures = [(stage, row["reason"] or "", row["replay"])]
        entries.append((row["id"], f"{what} (old check: {row['old_check']})", failures))
    return entries


REPLAY_NOTE = (
    "Each failure's reason, and the command that replays it: run it from the audit folder "
    "(paths are relative to it; its records/ folder holds each record's files)."
)


def _source_text(settings: dict[str, Any]) -> str:
    """The corpus by name, content digest and format (its path is this machine's own)."""
    digest = str(settings.get("source_sha256") or "")[:12]
    name = Path(str(settings.get("source", "?"))).name
    return f"`{name}` ({settings.get('format')}" + (f", sha256 {digest}…)" if digest else ")")


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _other_entries(summary: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (row["id"], f"{row['verdict']}: {row['reason']}")
        for row in summary["rows"]
        if row["verdict"] in ("unreadable", "error")
    ]


def partial_audit_text(only: list[str]) -> str:
    """What a partial audit's report and command say first: which gates ran."""
    return (
        f"PARTIAL AUDIT: only {', '.join(only)} ran on each record (--only); the other gates "
        "were skipped, so a record verified here is not verified by the whole contract."
    )


def integrity_text(summary: dict[str, Any]) -> tuple[str, list[str]]:
    """The report's evidence-integrity line, and warnings for evidence it cannot vouch for
    (see ``integrity.py``; changed evidence never reaches a report)."""
    check = summary.get("evidence_integrity") or {}
    verified = check.get("verified", 0)
    line = (
        f"Evidence integrity: {verified} evidence file(s) match the SHA-256 recorded when they "
        "were judged"
    )
    warnings = []
    if check.get("unverifiable_ids"):
        ids = check["unverifiable_ids"]
        warnings.append(
            f"UNVERIFIABLE: {len(ids)} record(s) have evidence but no recorded digest (a store "
            "written before digests were kept), so nothing shows whether their verdict.json is "
            f"the one judged: {', '.join(ids)}. Judge them again (--resume --rejudge-record) "
            "to have it checked."
        )
    if check.get("missing_ids"):
        ids = check["missing_ids"]
        warnings.append(
            f"MISSING: {len(ids)} record(s) have a recorded digest but no verdict.json in "
            f"records/ (a folder carried without it?): {', '.join(ids)}."
        )
    return line + ("." if not warnings else "; not the others:"), warnings


def _markdown(summary: dict[str, Any], images: dict[str, bytes]) -> str:
    integrity, warnings = integrity_text(summary)
    lines = [
        "# kernelgate audit",
        "",
        f"Source: {_source_text(summary['settings'])}, device "
        f"`{summary['settings']['device']}`, {_records_text(summary)}.",
        "",
        *([f"> **{partial_audit_text(summary['only'])}**", ""] if summary.get("only") else []),
        *([reused_text(summary), ""] if reused_text(summary) else []),
        integrity,
        "",
        *[f"> **{warning}**\n" for warning in warnings],
    ]
    for title, header, rows in _sections(summary):
        lines += [f"## {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        lines += [
            "| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows
        ]
        lines.append("")
    if images:
        lines += ["## Plots", ""]
        lines += [f"![{PLOTS[name]}]({name}.png)" for name in images]
        lines.append("")
    lines += ["## Rejected records", "", REPLAY_NOTE, ""]
    for record_id, what, failures in _rejected_entries(summary):
        lines.append(f"- `{record_id}`: {what}")
        for gate, why, command in failures:
            lines.append(f"  - {gate}: {_one_line(why)}")
            if command:
                lines.append(f"    replay: `{command}`")
    lines += ["", "## Unreadable and error records", ""]
    lines += [f"- `{record_id}`: {what}" for record_id, what in _other_entries(summary)] or [
        "- none"
    ]
    return "\n".join(lines) + "\n"


HTML_STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:4px 8px;
text-align:left;vertical-align:top}th{background:#f0f0f0}code{font-size:90%;word-break:break-all}
img{max-width:100%;border:1px solid #eee;margin:.5em 0}
"""


def _html(summary: dict[str, Any], images: dict[str, bytes]) -> str:
    e = html.escape
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>kernelgate audit</title>",
        f"<style>{HTML_STYLE}</style></head><body><h1>kernelgate audit</h1>",
        f"<p>Source: {e(_source_text(summary['settings']))}, device "
        f"<code>{e(summary['settings']['device'])}</code>, {e(_records_text(summary))}.</p>",
    ]
    if summary.get("only"):
        parts.append(f"<p style='color:#b00'><b>{e(partial_audit_text(summary['only']))}</b></p>")
    if reused_text(summary):
        parts.append(f"<p>{e(reused_text(summary) or '')}</p>")
    integrity, warnings = integrity_text(summary)
    parts.append(f"<p>{e(integrity)}</p>")
    parts += [f"<p style='color:#b00'><b>{e(warning)}</b></p>" for warning in warnings]
    for title, header, rows in _sections(summary):
        parts.append(f"<h2>{e(title)}</h2><table><tr>")
        parts += [f"<th>{e(h)}</th>" for h in header]
        parts.append("</tr>")
        for row in rows:
            parts.append("<tr>" + "".join(f"<td>{e(cell)}</td>" for cell in row) + "</tr>")
        parts.append("</table>")
    if images:
        parts.append("<h2>Plots</h2>")
    for name, png in images.items():
        data = base64.b64encode(png).decode()
        parts.append(
            f"<h3>{e(PLOTS[name])}</h3><img alt='{e(name)}' src='data:image/png;base64,{data}'>"
        )
    parts.append(
        f"<h2>Rejected records</h2><p>{e(REPLAY_NOTE)}</p><table><tr><th>record</th>"
        "<th>what failed</th><th>why, and the replay</th></tr>"
    )
    for record_id, what, failures in _rejected_entries(summary):
        details = "<br>".join(
            f"<b>{e(gate)}</b>: {e(_one_line(why))}"
            + (f"<br><code>{e(command)}</code>" if command else "")
            for gate, why, command in failures
        )
        parts.append(
            f"<tr><td><code>{e(record_id)}</code></td><td>{e(what)}</td><td>{details}</td></tr>"
        )
    parts.append(
        "</table><h2>Unreadable and error records</h2><table>"
        "<tr><th>record</th><th>reason</th></tr>"
    )
    for record_id, what in _other_entries(summary):
        parts.append(f"<tr><td><code>{e(record_id)}</code></td><td>{e(what)}</td></tr>")
    parts.append("</table></body></html>")
    return "\n".join(parts)


def _without_row(rows: list[dict[str, Any]], corpus_ids: list[str] | None) -> list[str]:
    done = {row["id"] for row in rows}
    return [i for i in corpus_ids or [] if i not in done]


def _records_text(summary: dict[str, Any]) -> str:
    """How many records the report covers and, for an audit not finished yet, which are left."""
    missing = summary.get("without_row") or []
    if not missing:
        return f"{summary['records']} records"
    return (
        f"{summary['records']} of {summary['corpus_records']} records (not finished: "
        f"{len(missing)} without a row yet, {', '.join(missing)}; every figure below is over "
        "the records with a row)"
    )


def write_report(
    out_dir: Path,
    rows: list[dict[str, Any]],
    settings: dict[str, Any],
    runs: list[dict[str, Any]] | None = None,
    corpus_ids: list[str] | None = None,
) -> dict[str, Any]:
    """Write summary.json, report.md, report.html and the plot PNGs; return the summary.

    Each file is replaced whole: an interrupted audit that runs out of time while writing
    its report leaves every file either as it was or complete, never half written.

    Before anything is written, every record's evidence file is digested again and compared
    with its row (``integrity.check_evidence``): evidence that changed since it was judged
    raises ``EvidenceChanged`` and no file is written; missing evidence, and evidence whose
    row records no digest (an older store), are named at the top of the report.
    """
    check = check_evidence(out_dir, rows)
    refuse_changed(check, out_dir, settings)
    summary = summarize(rows, settings, runs or [], corpus_ids)
    summary["evidence_integrity"] = check.summary()
    for row in summary["rows"]:
        row["evidence_integrity"] = check.status.get(row["id"])
    images = _plots(summary, rows)
    for name, png in images.items():
        write_atomic(out_dir / f"{name}.png", png)
    summary["plots"] = sorted(f"{name}.png" for name in images)
    write_atomic(out_dir / "summary.json", json.dumps(summary, indent=2))
    write_atomic(out_dir / "report.md", _markdown(summary, images))
    write_atomic(out_dir / "report.html", _html(summary, images))
    return summary
