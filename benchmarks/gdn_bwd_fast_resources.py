"""Offline sm_90 resources of the register-resident GDN backward (kernels/gdn/chunk_bwd_fast.py),
and its launch count beside the shipped (staged) backward's. No GPU needed.

The same CPU path as benchmarks/gdn_fwd_fast_resources.py: run ``chunk_gated_delta_rule``
forward and backward under the Triton interpreter with ``chunk.BACKWARD = "registers"`` and
kernelgate's launch recorder, keep the new kernels' launches, compile each distinct
specialization offline for sm_90 in a process without the interpreter once per Triton
installation (the installed one, and Triton 3.6, the device's, from ``--triton36 DIR`` when
that folder exists), and record ptxas's registers, spill bytes and shared memory. A kernel
passes only with 0 spill bytes under every Triton compiled and within sm_90's 227 KiB of
shared memory per CTA. The reverse scan (``_state_bwd_kernel``) is the shipped kernel,
judged by benchmarks/gdn_bwd_resources.py.

Cases: fp32 inputs, head sizes ``--dims`` ("K" for K = V, or "K:V"; default K = V = 128 and
64), T = 70, two heads, with an initial state (the new kernels do not specialize on it).
Head sizes that are not multiples of 4 launch with column tiles of
``FAST_BWD_UNALIGNED_BLOCK`` (the BK and BV of each row say which tiles were compiled).
``--configs`` also compiles other launch configurations (num_warps, num_stages, column tile).

Launch count: the launches of one backward call of each path (forward launches excluded),
counted at the interpreter's launch entry point.

    PYTHONPATH=src python benchmarks/gdn_bwd_fast_resources.py --triton36 /tmp/tr36site \\
        --out benchmarks/results/gdn-bwd-fast-resources-cpu.json
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

FAST_KERNELS = ("_dqk_fast_kernel", "_wy_da_fast_kernel", "_wy_dkv_fast_kernel")
FORWARD_KERNELS = (
    "_wy_fwd_kernel",
    "_wy_apply_fwd_kernel",
    "_state_fwd_kernel",
    "_output_fwd_kernel",
)
CANDIDATE = ROOT / "examples" / "gdn" / "candidate.py"  # imports kernelgate.kernels.gdn
# Alternative configurations for --configs: (name, FAST_BWD_NUM_WARPS, FAST_BWD_NUM_STAGES,
# FAST_BWD_BLOCK), each an override of the defaults.
ALL = ("dqk_fast", "wy_da_fast", "wy_dkv_fast")
CONFIGS: tuple[tuple[str, dict[str, int], dict[str, int], dict[str, int]], ...] = (
    ("warps 4", dict.fromkeys(ALL, 4), {}, {}),
    ("stages 1", {}, dict.fromkeys(ALL, 1), {}),
    ("stages 2", {}, dict.fromkeys(ALL, 2), {}),
    ("block 16", {}, {}, dict.fromkeys(ALL, 16)),
    ("block 16, stages 2", {}, dict.fromkeys(ALL, 2), dict.fromkeys(ALL, 16)),
    ("block 64", {}, {}, dict.fromkeys(ALL, 64)),
)


def make_inputs(seq_len: int, heads: int, dim_k: int, dim_v: int) -> tuple:
    """fp32 GDN inputs in their usual regime (unit-norm keys, logsigmoid gates), with grad."""
    shape = (1, seq_len, heads)
    q = torch.randn(*shape, dim_k)
    k = F.normalize(torch.randn(*shape, dim_k), dim=-1)
    v = torch.randn(*shape, dim_v)
    g = F.logsigmoid(torch.randn(shape))
    beta = torch.rand(shape)
    h0 = torch.randn(1, heads, dim_k, dim_v)
    return tuple(x.requires_grad_() for x in (q, k, v, g, beta, h0))


def forward_backward(seq_len: int, heads: int, dim_k: int, dim_v: int) -> None:
    """One forward and backward call (initial state in, final state out)."""
    q, k, v, g, beta, h0 = make_inputs(seq_len, heads, dim_k, dim_v)
    o, ht = chunk_gated_delta_rule(q, k, v, g, beta, initial_state=h0, output_final_state=True)
    (o.sum() + ht.sum()).backward()


@contextlib.contextmanager
def settings(
    backward: str,
    warps: dict[str, int] | None = None,
    stages: dict[str, int] | None = None,
    blocks: dict[str, int] | None = None,
) -> Iterator[None]:
    """chunk.BACKWARD and the FAST_BWD_* launch settings overridden for the block."""
    tables = (gdn_chunk.FAST_BWD_NUM_WARPS, gdn_chunk.FAST_BWD_NUM_STAGES, gdn_chunk.FAST_BWD_BLOCK)
    saved = [dict(table) for table in tables]
    saved_backward = gdn_chunk.BACKWARD
    for table, override in zip(tables, (warps or {}, stages or {}, blocks or {}), strict=True):
        table.update(override)
    gdn_chunk.BACKWARD = backward
    try:
        yield
    finally:
        for table, before in zip(tables, saved, strict=True):
            table.clear()
            table.update(before)
        gdn_chunk.BACKWARD = saved_backward


def count_launches(path: str, dims: int = 32) -> dict[str, Any]:
    """Kernel launches of one backward call (T = 130, initial state, final state) of the
    ``path`` backward, by kernel name; the forward's launches are left out."""

    def call() -> None:
        with settings(path):
            forward_backward(130, 2, dims, dims)

    counts = interpreter_launch_counts(call)
    by_kernel = {name: n for name, n in counts.items() if name not in FORWARD_KERNELS}
    return {"launches": sum(by_kernel.values()), "by_kernel": by_kernel}


def record_fast_launches(
    dims: list[tuple[int, int]], configs: list[tuple]
) -> list[tuple[str, dict]]:
    """(config name, record) for every distinct specialization of the new kernels over the
    cases and ``configs`` (the defaults first)."""
    out: list[tuple[str, dict]] = []
    for name, warps, stages, blocks in configs:

        def call(warps=warps, stages=stages, blocks=blocks) -> None:
            with settings("registers", warps, stages, blocks):
                for dim_k, dim_v in dims:
                    forward_backward(70, 2, dim_k, dim_v)

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
        **{n: const[n] for n in ("BK", "BV") if n in const},
        "PREC": const.get("PREC"),
        "num_warps": options.get("num_warps"),
        "num_stages": options.get("num_stages"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--triton36", default="/tmp/tr36site", help="folder holding Triton 3.6")
    parser.add_argument(
        "--dims", nargs="+", default=["128", "64"], help="head sizes compiled: K (V = K) or K:V"
    )
    parser.add_argument("--configs", action="store_true", help="also the CONFIGS alternatives")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    args = parser.parse_args()
    default = (
        "default",
        dict(gdn_chunk.FAST_BWD_NUM_WARPS),
        dict(gdn_chunk.FAST_BWD_NUM_STAGES),
        dict(gdn_chunk.FAST_BWD_BLOCK),
    )
    configs = [default, *(CONFIGS if args.configs else ())]
    report: dict[str, Any] = {
        "what": "register-resident GDN backward (kernels/gdn/chunk_bwd_fast.py, chunk.BACKWARD "
        "= 'registers'): offline sm_90 resources of its kernels and launch counts",
        "command": "PYTHONPATH=src python "
        + " ".join(["benchmarks/gdn_bwd_fast_resources.py", *sys.argv[1:]]),
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "device": "offline sm_90 compile (no GPU); launches counted under TRITON_INTERPRET=1",
        "defaults": {
            "FAST_BWD_NUM_WARPS": default[1],
            "FAST_BWD_NUM_STAGES": default[2],
            "FAST_BWD_BLOCK": default[3],
            # the tile cap where K or V is not a multiple of 4 (chunk.fast_bwd_widths)
            "FAST_BWD_UNALIGNED_BLOCK": gdn_chunk.FAST_BWD_UNALIGNED_BLOCK,
        },
        "launches_per_backward": {
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
            f"{row['config']:20} {row['kernel']:20} K={row['K']} V={row['V']} "
            f"warps={row['num_warps']} stages={row['num_stages']}"
        ),
    )
    print(json.dumps(report["launches_per_backward"]))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
