"""benchmarks/gdn_scan_registers.py's register-resident scan prototype computes the shipped
scan's recurrence (interpreter, the smallest shape; the resources need an offline compile
that takes minutes, so they are the script's job, not a test's)."""

from __future__ import annotations

import pytest
import torch

from ..conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("gdn_scan_registers")


@pytest.mark.skipif(torch.cuda.is_available(), reason="an interpreter check (CPU)")
@pytest.mark.parametrize(("split_k", "block_v"), [(1, 16), (2, 32)])
def test_prototype_matches_shipped_scan(bench, split_k: int, block_v: int) -> None:
    k, v, g, beta, h0 = bench.make_inputs(1, 80, 2, 32, 32, "cpu")  # two chunks, ragged
    inp = bench.wy_inputs(k, v, g, beta)
    want = bench.shipped_scan(inp, h0)
    ref = bench.reference_scan(inp, h0)
    got = bench.register_scan(inp, h0, "tf32x3", block_v, split_k, 4)
    for x, y, r in zip(got, want, ref, strict=True):
        assert bench.max_rel_error(x, y) < 1e-6
        assert bench.max_rel_error(x, r) < 1e-6


def test_time_mode_needs_cuda(bench, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    args = bench.argparse.Namespace(variants=["tf32:16:1:8:default"], from_json=None)
    with pytest.raises(SystemExit, match="needs a CUDA device"):
        bench.time_mode(args)
