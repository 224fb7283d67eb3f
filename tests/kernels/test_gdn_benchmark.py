"""The CPU-side logic of benchmarks/gdn.py (the timings themselves need a GPU)."""

from __future__ import annotations

import json
import math

import pytest

from ..conftest import load_benchmark


@pytest.fixture(scope="module")
def bench():
    return load_benchmark("gdn")


def _row(bench, seq_len=4096):
    return {
        "T": seq_len,
        "roofline": bench.roofline(2, seq_len, 16, 128, 128),
        "ours_gated": {"fwd_ms": 1.5, "bwd_ms": 2.0, "fwdbwd_ms": 3.5},
        "ours_g0": {"fwd_ms": 1.4, "bwd_ms": 2.0, "fwdbwd_ms": 3.4},
        "fla_gated": {"fwd_ms": 0.5, "bwd_error": "RuntimeError: Triton >= 3.4.0 ..."},
        "fla_delta": {"fwd_ms": 0.7, "bwd_ms": 1.0, "fwdbwd_ms": 1.7},
        "naive_fp32_fwd_ms": 600.0,
    }


def test_roofline_scales_with_tokens(bench):
    small, large = bench.roofline(2, 512, 16, 128, 128), bench.roofline(2, 4096, 16, 128, 128)
    assert math.isclose(large["fwd_flops"], 8 * small["fwd_flops"])
    assert math.isclose(large["fwdbwd_ms"], 8 * small["fwdbwd_ms"])
    tokens = 2 * 4096 * 16
    assert math.isclose(large["fwd_bytes"], tokens * (2 * 128 * 2 + 128 * 2 + 2 + 4 + 128 * 2))
    expected = 1e3 * max(large["fwd_flops"] / 790e12, large["fwd_bytes"] / 4.8e12)
    assert math.isclose(large["fwd_ms"], expected)


def test_ratios_are_ours_over_theirs_and_skip_what_is_missing(bench):
    row = _row(bench)
    ratios = bench.ratios(row)
    assert ratios["ours_over_fla_gdn_fwd"] == pytest.approx(3.0)
    assert ratios["ours_over_fla_gdn_bwd"] is None  # fla's gated backward refused to run
    assert ratios["ours_g0_over_fla_deltanet_fwdbwd"] == pytest.approx(2.0)
    assert ratios["ours_over_roofline_fwd"] == pytest.approx(1.5 / row["roofline"]["fwd_ms"])
    assert ratios["naive_over_ours_fwd"] == pytest.approx(400.0)
    del row["naive_fp32_fwd_ms"], row["fla_gated"]
    ratios = bench.ratios(row)
    assert ratios["naive_over_ours_fwd"] is None and ratios["ours_over_fla_gdn_fwd"] is None
    json.dumps(ratios)  # goes into the JSON report as is


def test_print_row_and_environment(bench, capsys):
    row = _row(bench)
    row["ours_g0"] = {"fwd_error": "OutOfResources: shared memory"}
    bench.print_row(row)
    printed = capsys.readouterr().out
    assert "T=4096" in printed and "3.00" in printed  # ours / fla forward
    assert "fla gated bwd: RuntimeError" in printed and "ours g=0 fwd: OutOfResources" in printed
    assert "400x faster" in printed
    env = bench.environment("NVIDIA H200", None)
    assert {"device", "torch", "triton", "cuda", "fla", "date"} <= env.keys()
    assert env["device"] == "NVIDIA H200" and env["fla_expected"] == "0.6.0"
    assert env["sixteen_bit_compute"] == "fp32"  # bf16 timings are of the fp32 copies
    assert env["gdn_forward"] == "staged"  # the shipped forward unless --forward says
    assert env["gdn_backward"] == "staged"  # likewise the backward and --backward
    json.dumps(env)


def test_forward_option(bench):
    """--forward picks gdn.chunk.FORWARD (default: the shipped staged forward)."""
    parser = bench.argparse.ArgumentParser()
    bench.forward_option(parser)
    assert parser.parse_args([]).forward == "staged"
    assert parser.parse_args(["--forward", "registers"]).forward == "registers"
    with pytest.raises(SystemExit):
        parser.parse_args(["--forward", "fast"])


def test_backward_option(bench):
    """--backward picks gdn.chunk.BACKWARD (default: the shipped staged backward)."""
    parser = bench.argparse.ArgumentParser()
    bench.backward_option(parser)
    assert parser.parse_args([]).backward == "staged"
    assert parser.parse_args(["--backward", "registers"]).backward == "registers"
    with pytest.raises(SystemExit):
        parser.parse_args(["--backward", "fast"])
