"""benchmarks/audit_throughput.py: an audit run for a fixed time, its throughput and the
host's CPU by process kind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .audit_corpus import write_pairs
from .conftest import ROOT, load_benchmark

SCRIPT = ROOT / "benchmarks" / "audit_throughput.py"


def _module():
    return load_benchmark("audit_throughput")


@pytest.mark.parametrize(
    "cmdline, parent, kind",
    [
        ("python -P -m kernelgate.sandbox.worker 5 6", "", "worker"),
        ("python -m kernelgate.audit.zygote 7", "python -m kernelgate.cli audit c", "zygote"),
        ("python -m kernelgate.audit.zygote 7", "python -m kernelgate.audit.zygote 7", "judge"),
        ("python -m kernelgate.audit.judge req res", "", "judge"),
        ("python -P -m kernelgate.audit.oldcheck 9", "", "old check"),
        ("python -m kernelgate.cli audit h100.jsonl --out x", "", "audit"),
        ("/usr/local/cuda/bin/nvcc -c x.cu", "", "build"),
        ("/opt/gcc/bin/g++ -c main.cpp", "", "build"),
        ("compute-sanitizer --tool memcheck python", "", "sanitizer"),
        ("bash -c sleep", "", "other"),
        ("", "", "other"),
    ],
)
def test_each_process_of_an_audit_has_its_kind(cmdline: str, parent: str, kind: str) -> None:
    assert _module().process_kind(cmdline, parent) == kind


def test_the_sampler_counts_a_busy_process_from_its_first_sample_on() -> None:
    sampler = _module().CpuByKind()
    busy = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nend = time.time() + 1.5\nwhile time.time() < end: pass",
        ]
    )
    sampler.sample()  # the baseline: nothing counted yet
    assert sampler.totals == {}
    busy.wait()
    time.sleep(0.1)
    sampler.sample()
    # the child was gone at the second sample: its CPU after the first is missed, as the
    # module says; a process alive at both samples is counted
    keeper = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nend = time.time() + 1.2\nwhile time.time() < end: pass",
        ]
    )
    time.sleep(0.2)
    sampler.sample()
    time.sleep(0.8)
    sampler.sample()
    keeper.wait()
    assert sampler.totals.get("other", 0.0) >= 0.5, sampler.totals
    assert sampler.samples == 4


def test_throughput_counts_judged_rows_by_mark_and_leaves_out_the_stop() -> None:
    rows = [
        (100.0, {"verdict": "unreadable"}),
        (130.0, {"verdict": "rejected"}),
        (170.0, {"verdict": "verified"}),
        (250.0, {"verdict": "rejected"}),
        (305.0, {"verdict": "rejected"}),  # finished while the audit was being stopped
    ]
    got = _module().throughput(rows, launched_at=100.0, ran=200.0)
    assert got["row_count"] == 5 and got["judged"] == 3 and got["judged_while_stopping"] == 1
    assert [r["verdict"] for r in got["rows"]] == [row["verdict"] for _, row in rows]
    assert got["judged_by_s"] == {"60": 1, "120": 2, "180": 3}
    assert got["judged_per_hour"] == pytest.approx(3 / 200 * 3600)
    assert got["verdicts"] == {"rejected": 3, "unreadable": 1, "verified": 1}


def test_each_row_keeps_what_a_comparison_needs_with_its_reasons_cut() -> None:
    row = {
        "id": "h100/L1/T9",
        "verdict": "rejected",
        "stage": "gates",
        "failed_gates": ["ORD-02"],
        "failed_rules": ["AUTH-01"],
        "seconds": 12.5,
        "reason": None,
        "gates": [
            {"id": "CMP-01", "status": "pass", "reason": "fine"},
            {"id": "ORD-02", "status": "fail", "reason": "x" * 500},
        ],
        "old_check_detail": {"big": "not kept"},
    }
    got = _module().row_digest(row)
    assert set(got) == {
        "id",
        "verdict",
        "stage",
        "failed_gates",
        "failed_rules",
        "seconds",
        "gate_reasons",
        "reason",
    }
    assert got["failed_rules"] == ["AUTH-01"] and got["reason"] is None
    assert list(got["gate_reasons"]) == ["ORD-02"]
    assert len(got["gate_reasons"]["ORD-02"]) == 300


def test_a_short_cpu_audit_slice_end_to_end(tmp_path: Path) -> None:
    corpus = write_pairs(tmp_path / "corpus", ["honest", "syntax_error"])
    out = tmp_path / "out.json"
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT / "src")}
    command = [sys.executable, str(SCRIPT), str(corpus), "--device", "cpu", "--workers", "2"]
    command += ["--seconds", "240", "--out", str(tmp_path / "audit"), "--json", str(out)]
    command += ["--audit-arg=--only", "--audit-arg=CMP-01"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(out.read_text())
    assert document["audit_finished_by_itself"] is True  # two records end well before 240 s
    assert document["row_count"] == 2 and document["judged"] == 2
    assert document["schema"] == "kernelgate.audit-throughput/2"
    kept = [r["verdict"] for r in document["rows"]]
    assert {v: kept.count(v) for v in kept} == document["verdicts"]
    assert all(r["id"] and "failed_gates" in r and "gate_reasons" in r for r in document["rows"])
    assert document["ran_s"] < 240
    assert (
        document["cpu_s_by_kind"].get("judge", 0) + document["cpu_s_by_kind"].get("worker", 0) > 0
    ), document["cpu_s_by_kind"]
    assert document["settings"] == {"device": "cpu", "workers": 2, "seconds": 240.0}
    assert document["code_commit"] and document["date"]


def test_a_missing_corpus_is_a_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "nope.jsonl"), "--device", "cpu"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode != 0
    assert "does not exist" in done.stderr and "Traceback" not in done.stderr
