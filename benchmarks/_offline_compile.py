"""One offline sm_90 compile of recorded launches, shared by the *_resources.py scripts.

The device runs Triton 3.6 while this machine has 3.9, and the two emit different PTX for
the same kernel, so each script compiles the same recorded launches once per Triton
installation: a fresh process without the interpreter, with the other installation's folder
(``pip install --target DIR --no-deps triton==3.6.0``) first on its PYTHONPATH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_COMPILE = (
    "import json, sys, triton\n"
    "from kernelgate.sandbox.resources import compile_records\n"
    "print(json.dumps([triton.__version__, compile_records(sys.argv[1], json.load(sys.stdin))]))\n"
)


def compile_offline(
    records: list[dict], candidate: Path, triton_site: str | None, timeout: float = 3000
) -> tuple[str, list[dict]]:
    """(Triton version, one result per record), compiled in a process without the
    interpreter, with ``triton_site`` first on its path when given; ``candidate`` is the
    example file compile_records resolves the kernels against."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    paths = ([triton_site] if triton_site else []) + [str(ROOT / "src")]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    done = subprocess.run(
        [sys.executable, "-c", _COMPILE, str(candidate)],
        input=json.dumps(records),
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(done.stderr[-3000:])
    version, results = json.loads(done.stdout.strip().splitlines()[-1])
    return version, results


def triton_sites(triton36: str | None) -> list[str | None]:
    """The installed Triton (None), then ``triton36`` when that folder exists."""
    return [None] + ([triton36] if triton36 and Path(triton36).is_dir() else [])


# Bytes of shared memory one CTA can have on sm_90 (227 KiB): a kernel over it does not launch.
SM90_MAX_SHARED = 232448


def resource_fields(result: dict[str, Any]) -> dict[str, Any]:
    """One compile result as every resources JSON keeps it: the figures, then ``spills`` (a
    compile error counts, since nothing says it would not spill) and ``fits_shared``."""
    fields = {
        "registers": result.get("registers"),
        "spill_store_bytes": result.get("spill_bytes"),
        "spill_load_bytes": result.get("spill_load_bytes"),
        "stack_frame_bytes": result.get("stack_frame_bytes"),
        "shared_bytes": result.get("shared_bytes"),
        "error": result.get("error"),
    }
    fields["spills"] = bool(fields["error"] or fields["spill_store_bytes"])
    fields["fits_shared"] = (fields["shared_bytes"] or 0) <= SM90_MAX_SHARED
    return fields


def resource_text(row: dict[str, Any], error_chars: int = 200) -> str:
    """The figures of a ``resource_fields`` row as the scripts print one line a kernel."""
    return (
        f"regs={row['registers']} spill st/ld={row['spill_store_bytes']}/"
        f"{row['spill_load_bytes']} smem={row['shared_bytes']}"
        + ("" if row["fits_shared"] else " (over 227 KiB)")
        + (f" ERROR {str(row['error'])[:error_chars]}" if row["error"] else "")
    )


def head_sizes(dims: list[str]) -> list[tuple[int, int]]:
    """(K, V) of each ``--dims`` entry, "K" (V = K) or "K:V"."""
    out = []
    for text in dims:
        dim_k, _, dim_v = text.partition(":")
        out.append((int(dim_k), int(dim_v or dim_k)))
    return out


def interpreter_launch_counts(call: Callable[[], None]) -> Counter[str]:
    """Kernel launches by name while ``call`` runs under TRITON_INTERPRET=1, counted at the
    interpreter's launch entry point (restored afterwards, whatever ``call`` raises)."""
    from triton.runtime.interpreter import InterpretedFunction

    counts: Counter[str] = Counter()
    original_run = InterpretedFunction.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        counts[self.fn.__name__] += 1
        return original_run(self, *args, **kwargs)

    InterpretedFunction.run = run
    try:
        call()
    finally:
        InterpretedFunction.run = original_run
    return counts


def record_interpreter_launches(call: Callable[[], None], names: set[str]) -> list[dict]:
    """The launch records (kernelgate.sandbox.resources.LaunchRecorder) of the kernels
    ``names`` while ``call`` runs under the interpreter: what compile_offline compiles."""
    from triton.runtime.interpreter import InterpretedFunction

    from kernelgate.sandbox.resources import LaunchRecorder

    recorder = LaunchRecorder()
    original_run = InterpretedFunction.run
    recorder.install(interpreter=True)
    try:
        call()
        return [
            r
            for r in recorder.drain()
            if r.get("backend") == "triton-interpreter" and r["name"] in names
        ]
    finally:
        InterpretedFunction.run = original_run


def compile_configs(
    pairs: list[tuple[str, dict]],
    candidate: Path,
    triton36: str | None,
    describe: Callable[[dict], dict[str, Any]],
    line: Callable[[dict[str, Any]], str],
) -> dict[str, Any]:
    """The ``compile`` block of a resources JSON: every (config name, launch record) of
    ``pairs`` compiled offline with the installed Triton and ``triton36`` (in parallel, one
    process each), a row a kernel (``describe`` of its record, then ``resource_fields``),
    printed as ``line(row)`` and its figures, and whether the "default" config is spill-free
    and within shared memory under every Triton."""
    records = [r for _, r in pairs]
    rows: list[dict[str, Any]] = []
    timings: dict[str, float] = {}

    def one(site: str | None) -> tuple[str, list[dict], float]:
        started = time.monotonic()
        version, results = compile_offline(records, candidate, site)
        return version, results, time.monotonic() - started

    with ThreadPoolExecutor(max_workers=2) as pool:
        compiled = list(pool.map(one, triton_sites(triton36)))
    for version, results, seconds in compiled:
        timings[version] = round(seconds, 1)
        for (config, record), res in zip(pairs, results, strict=True):
            row = {"triton": version, "config": config, **describe(record)}
            row |= resource_fields(res)
            rows.append(row)
            print(f"triton {version:6} {line(row)} {resource_text(row, 300)}", flush=True)
    defaults_ok = all(
        not r["spills"] and r["fits_shared"] for r in rows if r["config"] == "default"
    )
    print(f"default configuration spill-free and within shared memory: {defaults_ok}")
    return {
        "compile_seconds": timings,
        "tritons": sorted(timings),
        "default_config_spill_free_and_fits": defaults_ok,
        "rows": rows,
    }
