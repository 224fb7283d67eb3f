"""benchmarks/admission_fit.py: admission's estimate against the peaks an audit's judges
measured. A tiny store and corpus; only the corpus's references run (on the meta device)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from kernelgate.audit import admission

from .conftest import load_benchmark

GIB = 1 << 30
REFERENCE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

N = {n}

def get_inputs():
    return [torch.randn(N)]

def get_init_inputs():
    return []
"""


def _store(path: Path, peaks: dict[str, dict[str, int]]) -> Path:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE rows (id TEXT PRIMARY KEY, data TEXT)")
        for record, peak in peaks.items():
            db.execute(
                "INSERT INTO rows VALUES (?, ?)",
                (record, json.dumps({"id": record, "peak_memory": peak})),
            )
    return path


def test_the_fit_compares_both_models_with_the_measured_peaks(tmp_path: Path) -> None:
    fit = load_benchmark("admission_fit")
    sizes = {1: 1 << 28, 2: 1 << 10}  # task -> elements of its relu's input
    corpus = tmp_path / "h100.jsonl"
    corpus.write_text(
        "\n".join(
            json.dumps({"level_id": 1, "task_id": t, "ref_code": REFERENCE.format(n=n)})
            for t, n in sizes.items()
        )
    )
    big = 2 * sizes[1]  # input and output
    store = _store(
        tmp_path / "audit.sqlite",
        {
            # the allocated peak wins over the reserved one where a row has it
            "h100/L1/T1": {
                "judge_gpu_reserved_bytes": 900 * GIB,
                "judge_gpu_allocated_bytes": 60 * big,
            },
            "h100/L1/T2": {"judge_gpu_reserved_bytes": GIB},  # under 2 GiB: not judged
            "h100/L1/T3": {},  # nothing measured: left out
        },
    )
    out = tmp_path / "fit.json"
    fit.main(store, corpus, json_out=out, large=2.0)
    result = json.loads(out.read_text())
    rows = {r["id"]: r for r in result["rows"]}
    assert set(rows) == {"h100/L1/T1", "h100/L1/T2"}
    first = rows["h100/L1/T1"]
    assert (first["elements"], first["work_elements"]) == (big, sizes[1])
    assert first["measured_bytes"] == 60 * big
    assert first["estimate_bytes"] == admission.estimate_device_bytes(big, sizes[1])
    # 40 bytes an element reserved less than the 60 measured; today's model more
    assert result["first_model"]["rows"] == result["estimate"]["rows"] == 1
    assert result["first_model"]["under_1"] == ["h100/L1/T1"]
    assert result["estimate"]["under_1"] == [] and result["estimate"]["min"] > 1.0


def test_the_fit_compares_the_checks_estimate_with_its_reported_peak(tmp_path: Path) -> None:
    fit = load_benchmark("admission_fit")
    n = 1 << 28
    corpus = tmp_path / "h100.jsonl"
    corpus.write_text(
        "\n".join(
            json.dumps({"level_id": 1, "task_id": t, "ref_code": REFERENCE.format(n=n)})
            for t in (1, 2)
        )
    )
    big = 2 * n
    rows = {
        # the check's child reported more than its estimate: under 1.0
        "h100/L1/T1": {"old_check_detail": {"device_peak_bytes": 40 * big}},
        "h100/L1/T2": {"old_check_detail": {"device_peak_bytes": 5 * big}},
    }
    store = tmp_path / "audit.sqlite"
    with sqlite3.connect(store) as db:
        db.execute("CREATE TABLE rows (id TEXT PRIMARY KEY, data TEXT)")
        for record, row in rows.items():
            db.execute("INSERT INTO rows VALUES (?, ?)", (record, json.dumps({"id": record} | row)))
    out = tmp_path / "fit.json"
    fit.main(store, corpus, json_out=out, large=2.0)
    result = json.loads(out.read_text())
    assert result["rows"] == [] and result["estimate"] == {"rows": 0}  # no judge peaks
    checks = {r["id"]: r for r in result["old_check_rows"]}
    assert checks["h100/L1/T1"]["estimate_bytes"] == admission.estimate_old_check_bytes(big, n)
    assert result["old_check"]["rows"] == 2
    assert result["old_check"]["under_1"] == ["h100/L1/T1"]
