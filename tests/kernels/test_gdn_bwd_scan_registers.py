"""benchmarks/gdn_bwd_scan_registers.py's register-resident backward scan prototype computes
the shipped reverse scan's recurrence (interpreter, the smallest shapes), its fused partials
sum to the backward's state products, its --time path runs (--dry, on the CPU), and its
committed compile JSON has the shape --time and the docs read. The resources themselves need
an offline compile that takes many minutes, so they are the script's job, not a test's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ..conftest import ROOT, load_benchmark

RESULTS = ROOT / "benchmarks" / "results" / "gdn-bwd-scan-registers-cpu.json"
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="an interpreter check (CPU)")


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("gdn_bwd_scan_registers")


@pytest.fixture(scope="module")
def case(bench):
    """Two chunks with a ragged second one, K = V = 32, an initial state and dht; the
    shipped scan, the fp64 loop and the shipped dW on them."""
    inp = bench.bwd_inputs(1, 80, 2, 32, 32, "cpu")
    shipped = bench.shipped_scan(inp)
    return inp, shipped, bench.reference_scan(inp), bench.shipped_dw(inp, *shipped[:2])


@cpu_only
@pytest.mark.parametrize(
    ("dot", "split_k", "block_v", "fuse", "halves", "split_pt"),
    [
        ("tf32x3", 1, 16, 0, 0, 0),
        ("ieee", 2, 32, 0, 0, 0),
        ("tf32x3", 2, 16, 1, 0, 0),
        ("tf32x3", 2, 32, 0, 1, 0),
        ("tf32x3", 1, 16, 1, 1, 0),
        ("tf32x3", 2, 16, 0, 0, 1),
    ],
)
def test_prototype_matches_shipped_scan(
    bench, case, dot: str, split_k: int, block_v: int, fuse: int, halves: int, split_pt: int
) -> None:
    inp, shipped, ref, dw_shipped = case
    var = {"K": 32, "V": 32, "dot": dot, "BV": block_v, "NK": split_k, "fuse": fuse,
           "halves": halves, "split_pt": split_pt}  # fmt: skip
    row = bench.check_one(inp, shipped, ref, dw_shipped, var)
    want = set(bench.PARTS) | (set(bench.FUSED_PARTS) if fuse else set())
    assert set(row["vs_fp64"]) == want
    assert row["worst"] < 1e-6, row


def test_fp64_loop_is_the_shipped_recurrence(bench, case) -> None:
    """The reference itself: the shipped scan and the shipped _qk_bwd_kernel's dW agree
    with it, so the prototype is judged against the recurrence the backward uses."""
    _, shipped, ref, dw_shipped = case
    assert max(bench.compare(shipped, ref[:3]).values()) < 1e-6
    assert bench.max_rel_error(dw_shipped, ref[4]) < 1e-6


@cpu_only
def test_time_mode_dry_runs(bench, monkeypatch: pytest.MonkeyPatch) -> None:
    """--time --dry: the device code path at a tiny shape under the interpreter."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    args = bench.argparse.Namespace(
        variants=["tf32x3:16:2:4:2", "tf32x3:16:2:4:default:1:1"], from_json=None, dry=True
    )
    out = bench.time_mode(args)
    rows = out["rows"]
    assert [r["T"] for r in rows] == [70] * 3 + [130] * 3
    for row in rows:
        if "vs_shipped" in row:
            assert row["K"] == 32 and row["NK"] == 2
            assert max(row["vs_shipped"].values()) < 1e-6


def test_time_mode_needs_cuda(bench, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    args = bench.argparse.Namespace(variants=["tf32:16:1:8:default"], from_json=None, dry=False)
    with pytest.raises(SystemExit, match="needs a CUDA device"):
        bench.time_mode(args)


def test_variant_grid_and_parsing(bench) -> None:
    grid = bench.variants((128, 64))
    assert all(set(v) == set(bench.VARIANT_KEYS) for v in grid)
    assert len({tuple(v.values()) for v in grid}) == len(grid)
    assert {v["fuse"] for v in grid} == {0, 1}
    assert {v["halves"] for v in grid} == {0, 1}
    assert {v["split_pt"] for v in grid} == {0, 1}
    assert bench.parse_variant("tf32x3:16:2:4:default:1", 128) == {
        "K": 128, "V": 128, "dot": "tf32x3", "BV": 16, "NK": 2, "warps": 4, "stages": None,
        "fuse": 1, "halves": 0, "split_pt": 0,
    }  # fmt: skip
    assert bench.parse_variant("tf32:32:1:8:2:0:1", 128)["halves"] == 1
    assert bench.parse_variant("tf32x3:16:2:4:2:0:0:1", 128)["split_pt"] == 1
    with pytest.raises(ValueError, match="DOT:BV:NK"):
        bench.parse_variant("tf32x3:16", 128)


@pytest.mark.skipif(not RESULTS.exists(), reason="no committed compile results")
def test_table_marks_settings(bench) -> None:
    """The docs' table: a setting passes only without spills under every Triton, and is
    listed apart when it asks for more shared memory than sm_90 has."""
    base = {"K": 128, "V": 128, "dot": "tf32x3", "BV": 16, "NK": 2, "fuse": 0, "halves": 1,
            "split_pt": 0, "error": None}  # fmt: skip

    def row(triton: str, warps: int, stages, spill: int, smem: int) -> dict:
        return {**base, "triton": triton, "warps": warps, "stages": stages, "registers": 200,
                "spill_store_bytes": spill, "shared_bytes": smem, "spills": bool(spill),
                "fits_shared": smem <= bench.SM90_MAX_SHARED}  # fmt: skip

    rows = [row("3.9.0", 4, 2, 0, 1024), row("3.6.0", 4, 2, 0, 1024)]
    rows += [row("3.9.0", 8, None, 0, 300 * 1024), row("3.6.0", 8, None, 0, 300 * 1024)]
    rows += [row("3.9.0", 4, 1, 0, 1024), row("3.6.0", 4, 1, 8, 1024)]
    line = bench.table({"rows": rows}).splitlines()[-1]
    assert line.startswith("| 128 | halves | 0 | tf32x3 | 16 | 2 | 4/2, 8/d | 4/2 | 0; 0-8 |")
    verdict = bench.spill_free({"rows": rows})
    assert [(v["warps"], v["stages"]) for v in verdict] == [(4, 2)]


def test_committed_json_shape(bench) -> None:
    """Every variant compiled under each Triton the JSON lists, with the figures --time's
    spill_free and the docs read; the check rows all agree to fp32 accuracy."""
    report = json.loads(Path(RESULTS).read_text())
    compiled = report["compile"]
    rows = compiled["rows"]
    versions = {r["triton"] for r in rows}
    assert len(versions) == len(compiled["tritons"])
    per_version = {v: sum(r["triton"] == v for r in rows) for v in versions}
    assert set(per_version.values()) == {compiled["variants"]}
    fields = {"registers", "spill_store_bytes", "shared_bytes", "spills", "fits_shared"}
    assert all(fields <= set(r) and set(bench.VARIANT_KEYS) <= set(r) for r in rows)
    assert all(r["spills"] == bool(r["error"] or r["spill_store_bytes"]) for r in rows)
    for var in bench.spill_free(compiled):
        assert var["K"] == 128
    assert report["check"] and max(r["worst"] for r in report["check"]) < 1e-6
    assert {r.get("halves", 0) for r in report["check"]} == {0, 1}
    assert {r.get("split_pt", 0) for r in report["check"]} == {0, 1}
