"""Memory-aware admission's estimate against what each judge of a device audit measured.

``audit/admission.py`` reserves, per judge, an estimate of the device memory it will hold,
fitted to a device audit rather than derived. This script is that fit, repeatable: for every
row of an audit store whose judge measured its own device memory
(``peak_memory.judge_gpu_allocated_bytes``, or for older rows the allocator's reserved peak,
``judge_gpu_reserved_bytes``, which also counts freed blocks it kept), it sizes the row's
reference on the meta device again (``Footprint.elements`` and ``work_elements``, from the
corpus the audit read), and
compares the estimate of today's model, and of the first model (40 bytes per held element,
nothing for ``forward``'s live tensors), with the measured peak::

    PYTHONPATH=src python benchmarks/admission_fit.py AUDIT_DIR_OR_SQLITE \\
        ../shared/corpora/cuda-l1/h100.jsonl --json OUT.json

For each model it prints and writes, over the rows that held over ``--large`` GiB (default
2: below that the fixed part for the two CUDA contexts decides), the smallest and the median
ratio of estimate to measured peak: under 1.0, a judge held more than it reserved, and the
judges admitted beside it could run the device out of memory. The worker's device memory is
not measured by the judge; the margin above 1.0 is what covers it. Rows whose KernelBench
check reported its child's device peak (since the two-phase admission) are compared the same
way with ``estimate_old_check_bytes`` (``old_check``).

Only the corpus's references are imported (they are trusted); no candidate code runs.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from kernelgate.audit import admission
from kernelgate.audit.admission import GIB

FIRST_MODEL_BYTES_PER_ELEMENT = 40  # the model before 2026-12-05 (de26e02)


def first_model_bytes(elements: int | None) -> int:
    """The first model's estimate: 40 bytes per held element, nothing for live tensors."""
    held = admission.held_device_bytes(elements)
    if elements is None:
        return admission.CONTEXT_BYTES + admission.UNKNOWN_ELEMENTS_BYTES + held
    return admission.CONTEXT_BYTES + FIRST_MODEL_BYTES_PER_ELEMENT * elements + held


def store_rows(store: Path) -> list[dict[str, Any]]:
    """The rows of an audit's ``audit.sqlite`` (read from a copy: nothing is written)."""
    path = store / "audit.sqlite" if store.is_dir() else store
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "audit.sqlite"
        shutil.copy(path, copy)
        with sqlite3.connect(copy) as db:
            return [json.loads(data) for (data,) in db.execute("SELECT data FROM rows")]


def check_peaks(store: Path) -> dict[str, int]:
    """Record id -> the device peak its KernelBench check's child reported
    (``old_check_detail.device_peak_bytes``, rows since the two-phase admission): what
    ``admission.estimate_old_check_bytes`` is checked against. The candidate ran in that
    child and could misstate it; it serves this fit, never a verdict."""
    peaks = {}
    for row in store_rows(store):
        peak = (row.get("old_check_detail") or {}).get("device_peak_bytes")
        if isinstance(peak, int) and peak > 0:
            peaks[str(row["id"])] = peak
    return peaks


def measured_rows(store: Path) -> dict[str, int]:
    """Record id -> the judge's measured device peak, from an audit's ``audit.sqlite``."""
    rows = store_rows(store)
    peaks = {}
    for row in rows:
        measured = row.get("peak_memory") or {}
        # what the tensors took at once where the row has it (since 2026-12-05), else what
        # the allocator reserved (it also keeps freed blocks: an upper bound)
        peak = measured.get("judge_gpu_allocated_bytes") or measured.get("judge_gpu_reserved_bytes")
        if isinstance(peak, int) and peak > 0:
            peaks[str(row["id"])] = peak
    return peaks


def corpus_references(corpus: Path, folder: Path) -> dict[str, Path]:
    """Record id -> its reference written to ``folder``, for a CUDA-L1 JSON-lines file
    (ids as the audit gives them: ``<file>/L<level>/T<task>``)."""
    references = {}
    for line in corpus.read_text().splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        record_id = f"{corpus.stem}/L{record['level_id']}/T{record['task_id']}"
        path = folder / f"{record_id.replace('/', '_')}.py"
        path.write_text(record["ref_code"])
        references[record_id] = path
    return references


def ratios(rows: list[dict[str, Any]], key: str, large: float) -> dict[str, Any]:
    """Estimate over measured peak for the rows that held over ``large`` GiB."""
    picked = [r for r in rows if r["measured_bytes"] > large * GIB]
    if not picked:
        return {"rows": 0}
    values = sorted((r[key] / r["measured_bytes"], r["id"]) for r in picked)
    return {
        "rows": len(picked),
        "min": round(values[0][0], 3),
        "min_record": values[0][1],
        "median": round(statistics.median(v for v, _ in values), 3),
        "under_1": [i for v, i in values if v < 1.0],
    }


def main(
    store: Annotated[Path, typer.Argument(help="an audit folder or its audit.sqlite")],
    corpus: Annotated[Path, typer.Argument(help="the CUDA-L1 JSON-lines file it audited")],
    json_out: Annotated[Path | None, typer.Option("--json", help="write the fit here")] = None,
    large: Annotated[float, typer.Option(help="GiB above which a row is judged")] = 2.0,
) -> None:
    if not store.exists() or not corpus.is_file():
        typer.echo(f"not found: {store if not store.exists() else corpus}", err=True)
        raise typer.Exit(2)
    peaks, checks = measured_rows(store), check_peaks(store)
    rows: list[dict[str, Any]] = []
    check_rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        references = corpus_references(corpus, Path(tmp))
        for record_id in sorted(set(peaks) | set(checks)):
            if record_id not in references:
                continue
            elements, work = admission.reference_elements(references[record_id])
            sizes = {"id": record_id, "elements": elements, "work_elements": work}
            if record_id in peaks:
                rows.append(
                    sizes
                    | {
                        "measured_bytes": peaks[record_id],
                        "estimate_bytes": admission.estimate_device_bytes(elements, work),
                        "first_model_bytes": first_model_bytes(elements),
                    }
                )
            if record_id in checks:
                check_rows.append(
                    sizes
                    | {
                        "measured_bytes": checks[record_id],
                        "estimate_bytes": admission.estimate_old_check_bytes(elements, work),
                    }
                )
    fit = {
        "schema": "kernelgate.admission-fit/1",
        "store": str(store),
        "corpus": corpus.name,
        "model": {
            "bytes_per_element": admission.BYTES_PER_ELEMENT,
            "bytes_per_work_element": admission.BYTES_PER_WORK_ELEMENT,
            "context_bytes": admission.CONTEXT_BYTES,
        },
        "large_gib": large,
        "estimate": ratios(rows, "estimate_bytes", large),
        "first_model": ratios(rows, "first_model_bytes", large),
        # the KernelBench check's own reservation against its child's reported peak
        "old_check": ratios(check_rows, "estimate_bytes", large),
        "rows": rows,
        "old_check_rows": check_rows,
    }
    fit["model"] |= {
        "old_check_bytes_per_element": admission.OLD_CHECK_BYTES_PER_ELEMENT,
        "old_check_bytes_per_work_element": admission.OLD_CHECK_BYTES_PER_WORK_ELEMENT,
    }
    for name in ("estimate", "first_model", "old_check"):
        r = fit[name]
        typer.echo(
            f"{name:12s} rows over {large:g} GiB: {r['rows']}, estimate/measured min "
            f"{r.get('min')} ({r.get('min_record')}), median {r.get('median')}, "
            f"under 1.0: {len(r.get('under_1', []))}"
        )
    if json_out is not None:
        json_out.write_text(json.dumps(fit, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(typer.run(main))
