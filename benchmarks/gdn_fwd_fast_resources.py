"""Offline sm_90 resources of the register-resident GDN forward (kernels/gdn/chunk_fwd_fast.py),
and its launch count beside the shipped (staged) forward's. No GPU needed.

RES-02's CPU path, as benchmarks/gdn_bwd_resources.py uses it: run ``chunk_gated_delta_rule``
forward under the Triton interpreter with ``chunk.FORWARD = "registers"`` and kernelgate's
launch recorder, keep the new kernels' launches, compile each distinct specialization offline
for sm_90 in a process without the interpreter (``kernelgate.sandbox.resources.
compile_records``) once per Triton installation (the installed one, and Triton 3.6, the
device's, from ``--triton36 DIR`` when that folder exists), and record ptxas's registers,
spill bytes and the shared memory each needs. A kernel passes only with 0 spill bytes under
every Triton compiled and within sm_90's 227 KiB of shared memory per CTA.

Cases: fp32 inputs (16-bit ones run as fp32 copies by default, the same specializations),
head sizes ``--dims`` ("K" for K = V, or "K:V"; default K = V = 128 and 64), T = 70 (two
chunks, the second ragged; T, the chunk count and H are runtime values, so the records are
those of any length), two heads, with and without an initial state (the scan specializes on
it). ``--configs`` also compiles other launch configurations (num_warps, num_stages, the
scan's V tile, the column tiles) to compare against the defaults in chunk.py. A K or V that
is not a multiple of 4 and above 32 runs zero-padded (chunk.registers_padding), so its rows
show the padded sizes the kernels were launched with (33 as 36, 63 as 64, 1 beside 64 as 4).

Launch count: the launches of one forward call of each path, counted at the interpreter's
launch entry point (not deduplicated, unlike the resource records).

    PYTHONPATH=src python benchmarks/gdn_fwd_fast_resources.py --triton36 /tmp/tr36site \\
        --out benchmarks/results/gdn-fwd-fast-resources-cpu.json
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ["TRITON_INTERPRET"] = "1"  # before any kernel is defined

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
try:
    import kernelgate  # noqa: F401
except ImportError:  # run from a checkout without installing it
    sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _offline_compile import (  # noqa: E402
    compile_configs,
    head_sizes,
    interpreter_launch_counts,
    record_interpreter_launches,
)

from kernelgate.kernels.gdn import chunk as gdn_chunk  # noqa: E402
from kernelgate.kernels.gdn import chunk_gated_delta_rule  # noqa: E402

FAST_KERNELS = ("_wy_fast_kernel", "_scan_fast_kernel", "_output_fast_kernel")
CANDIDATE = ROOT / "examples" / "gdn" / "candidate.py"  # imports kernelgate.kernels.gdn
# Alternative configurations for --configs: (name, FAST_NUM_WARPS, FAST_NUM_STAGES,
# FAST_SCAN_BLOCK_V, FAST_BLOCK), each an override of the defaults; each compiles every
# kernel at every case.
B32 = {"wy_kk": 32, "wy_fast": 32, "output_fast": 32}
CONFIGS: tuple[tuple[str, dict[str, int], dict[str, int], int, dict[str, int]], ...] = (
    ("warps 4/4/4", {"wy_fast": 4, "scan_fast": 4, "output_fast": 4}, {}, 16, {}),
    ("warps 8/8/8", {"wy_fast": 8, "scan_fast": 8, "output_fast": 8}, {}, 16, {}),
    ("stages 1/1/1", {}, {"wy_fast": 1, "scan_fast": 1, "output_fast": 1}, 16, {}),
    ("stages 2/2/2", {}, {"wy_fast": 2, "scan_fast": 2, "output_fast": 2}, 16, {}),
    ("stages 3/3/3", {}, {"wy_fast": 3, "scan_fast": 3, "output_fast": 3}, 16, {}),
    ("blocks 32", {}, {}, 16, B32),
    ("blocks 32, stages 1", {}, {"wy_fast": 1, "output_fast": 1}, 16, B32),
    ("kk 32", {}, {}, 16, {"wy_kk": 32}),
    ("kk 32, stages 1", {}, {"wy_fast": 1, "output_fast": 1}, 16, {"wy_kk": 32}),
    ("scan BV 32", {}, {}, 32, {}),
)


def make_inputs(seq_len: int, heads: int, dim_k: int, dim_v: int, with_h0: bool) -> tuple:
    """fp32 GDN inputs in their usual regime (unit-norm keys, logsigmoid gates)."""
    shape = (1, seq_len, heads)
    q = torch.randn(*shape, dim_k)
    k = F.normalize(torch.randn(*shape, dim_k), dim=-1)
    v = torch.randn(*shape, dim_v)
    g = F.logsigmoid(torch.randn(shape))
    beta = torch.rand(shape)
    h0 = torch.randn(1, heads, dim_k, dim_v) if with_h0 else None
    return q, k, v, g, beta, h0


@contextlib.contextmanager
def forward_path(name: str) -> Iterator[None]:
    """chunk.FORWARD set to ``name`` for the block, restored after."""
    saved = gdn_chunk.FORWARD
    gdn_chunk.FORWARD = name
    try:
        yield
    finally:
        gdn_chunk.FORWARD = saved


@contextlib.contextmanager
def launch_config(
    warps: dict[str, int], stages: dict[str, int], scan_v: int, blocks: dict[str, int]
) -> Iterator[None]:
    """chunk.py's FAST_* launch settings overridden for the block, restored after."""
    tables = (gdn_chunk.FAST_NUM_WARPS, gdn_chunk.FAST_NUM_STAGES, gdn_chunk.FAST_BLOCK)
    saved = [dict(table) for table in tables]
    saved_v = gdn_chunk.FAST_SCAN_BLOCK_V
    for table, override in zip(tables, (warps, stages, blocks), strict=True):
        table.update(override)
    gdn_chunk.FAST_SCAN_BLOCK_V = scan_v
    try:
        yield
    finally:
        for table, before in zip(tables, saved, strict=True):
            table.clear()
            table.update(before)
        gdn_chunk.FAST_SCAN_BLOCK_V = saved_v


def count_launches(path: str, dims: int = 32) -> dict[str, Any]:
    """Kernel launches of one forward call (T = 130, initial state in, final state out) of
    the ``path`` forward, by kernel name, counted at the interpreter's launch entry point."""

    def call() -> None:
        q, k, v, g, beta, h0 = make_inputs(130, 2, dims, dims, True)
        with forward_path(path), torch.no_grad():
            chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)

    counts = interpreter_launch_counts(call)
    return {"launches": sum(counts.values()), "by_kernel": dict(counts)}


def record_fast_launches(
    dims: list[tuple[int, int]], configs: list[tuple]
) -> list[tuple[str, dict]]:
    """(config name, record) for every distinct specialization of the new kernels over the
    cases and ``configs`` (the defaults first)."""
    out: list[tuple[str, dict]] = []
    for name, warps, stages, scan_v, blocks in configs:

        def call(warps=warps, stages=stages, scan_v=scan_v, blocks=blocks) -> None:
            with forward_path("registers"), launch_config(warps, stages, scan_v, blocks):
                for dim_k, dim_v in dims:
                    for with_h0 in (True, False):
                        q, k, v, g, beta, h0 = make_inputs(70, 2, dim_k, dim_v, with_h0)
                        with torch.no_grad():
                            chunk_gated_delta_rule(
                                q, k, v, g, beta, initial_state=h0, output_final_state=with_h0
                            )

        out.extend((name, r) for r in record_interpreter_launches(call, FAST_KERNELS))
    return out


def describe(record: dict) -> dict[str, Any]:
    """The specialization a record is, in a few fields (its constexprs and options)."""
    const = record.get("constexprs", {})
    options = record.get("options", {})
    return {
        "kernel": record["name"],
        "K": const.get("K"),
        "V": const.get("V"),
        **{n: const[n] for n in ("BKS", "NK", "BV", "BK", "HAS_H0", "STORE_HT") if n in const},
        "PREC": const.get("PREC"),
        "num_warps": options.get("num_warps"),
        "num_stages": options.get("num_stages"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triton36", default="/tmp/tr36site", help="folder holding Triton 3.6")
    parser.add_argument(
        "--dims",
        nargs="+",
        default=["128", "64"],
        help="head sizes compiled: K (then V = K) or K:V",
    )
    parser.add_argument("--configs", action="store_true", help="also the CONFIGS alternatives")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    default = (
        "default",
        dict(gdn_chunk.FAST_NUM_WARPS),
        dict(gdn_chunk.FAST_NUM_STAGES),
        gdn_chunk.FAST_SCAN_BLOCK_V,
        {},
    )
    configs = [default, *(CONFIGS if args.configs else ())]
    report: dict[str, Any] = {
        "what": "register-resident GDN forward (kernels/gdn/chunk_fwd_fast.py, chunk.FORWARD = "
        "'registers'): offline sm_90 resources of its kernels and launch counts",
        "command": "PYTHONPATH=src python "
        + " ".join(["benchmarks/gdn_fwd_fast_resources.py", *sys.argv[1:]]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": "offline sm_90 compile (no GPU); launches counted under TRITON_INTERPRET=1",
        "defaults": {
            "FAST_NUM_WARPS": default[1],  # None: chunk.fast_num_warps's rule
            "FAST_NUM_STAGES": default[2],
            "FAST_SCAN_BLOCK_V": default[3],
            "FAST_SCAN_ROWS": gdn_chunk.FAST_SCAN_ROWS,
            "FAST_BLOCK": dict(gdn_chunk.FAST_BLOCK),
        },
        "launches_per_forward": {
            "staged (shipped)": count_launches("staged"),
            "registers (new)": count_launches("registers"),
        },
    }
    pairs = record_fast_launches(head_sizes(args.dims), configs)
    report["compile"] = compile_configs(
        pairs,
        CANDIDATE,
        args.triton36,
        describe,
        lambda row: (
            f"{row['config']:12} {row['kernel']:20} K={row['K']} V={row['V']} "
            f"h0={row.get('HAS_H0')} warps={row['num_warps']} stages={row['num_stages']}"
        ),
    )
    print(json.dumps(report["launches_per_forward"]))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
