"""Where the CPU of a candidate's extension build goes, and what a precompiled header saves.

The H200 audit slices of 2026-12-04 spent about 30% of the machine's CPU in compilers
(``build`` in benchmarks/results/audit-slices-h200-2026-12-04-s12.json): on 16 cores that
CPU, not the GPU, bounds an audit's records an hour. Before the judge changes how candidates
build, this script measures it on real corpus records:

- each record whose candidate calls ``load_inline`` is imported in its own child process
  (the build happens at import in CUDA-L1 records) with a fresh ``TORCH_EXTENSIONS_DIR``;
- ninja's log gives each build step's wall time (``main.cpp`` through g++, ``cuda.cu`` through
  nvcc, the link), and the child's rusage the CPU of the whole build;
- with ``--pch``, the C++ step is compiled again with ``torch/extension.h`` precompiled
  (one header per distinct flag set, built once and timed on its own) and its time compared.

Candidate code runs here unconfined, in children: run this only on a machine you can throw
away (the device), never beside the judge. Results: ``--json`` (device, versions, date).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from provenance import code_commit, gpu_description, package_version

from kernelgate.formats.cuda_l1 import read_cuda_l1

SCHEMA = "kernelgate.build-split/1"
CHILD = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("candidate", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
"""


def ninja_steps(build: Path) -> dict[str, float]:
    """Seconds of each output in ninja's log (``start end mtime output hash`` per line)."""
    steps: dict[str, float] = {}
    log = build / ".ninja_log"
    if not log.exists():
        return steps
    for line in log.read_text().splitlines()[1:]:
        parts = line.split("\t")
        if len(parts) >= 4:
            steps[parts[3]] = round((int(parts[1]) - int(parts[0])) / 1000, 2)
    return steps


def ninja_variables(build: Path) -> dict[str, str]:
    """The top-level ``name = value`` lines of ``build.ninja``."""
    values: dict[str, str] = {}
    for line in (build / "build.ninja").read_text().splitlines():
        match = re.match(r"^(\w+) = (.*)$", line)
        if match:
            values[match.group(1)] = match.group(2)
    return values


def cpu_seconds_of(
    argv: list[str], cwd: Path, limit: float, env: dict[str, str] | None = None
) -> tuple[int, float, float, str]:
    """rc, wall and CPU seconds of one command and every process it waited for (wait4's
    rusage, as ``time`` reports it: right even when several run side by side)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log:
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = start + limit
        while (waited := os.wait4(process.pid, os.WNOHANG))[0] == 0:
            if time.perf_counter() > deadline:
                process.kill()
                waited = os.wait4(process.pid, 0)
                break
            time.sleep(0.05)
        log.seek(0)
        tail = log.read()[-600:]
    code, usage = os.waitstatus_to_exitcode(waited[1]), waited[2]
    return code, time.perf_counter() - start, usage.ru_utime + usage.ru_stime, tail


def build_record(record_id: str, source: str, work: Path, limit: float) -> dict[str, Any]:
    """Import one candidate in a child (which builds its extension); ninja's step times."""
    folder = work / hashlib.sha1(record_id.encode()).hexdigest()[:12]
    folder.mkdir(parents=True)
    (folder / "candidate.py").write_text(source)
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(folder / "ext"))
    rc, wall, cpu, tail = cpu_seconds_of(
        [sys.executable, "-c", CHILD, str(folder / "candidate.py")], folder, limit, env
    )
    builds = [p.parent for p in (folder / "ext").glob("*/build.ninja")]
    row: dict[str, Any] = {"id": record_id, "import_rc": rc, "wall_s": round(wall, 2)}
    row["cpu_s"] = round(cpu, 2)
    if not builds:
        row["outcome"] = "no build at import"
        return row
    build = builds[0]
    row["steps_s"] = ninja_steps(build)
    row["outcome"] = "built" if any(build.glob("*.so")) else "build failed"
    row["build_dir"] = str(build)
    if rc != 0 and row["outcome"] != "built":
        row["tail"] = tail[-300:]
    return row


def compile_cpp(build: Path, pch: Path | None, limit: float) -> dict[str, Any]:
    """Compile the build's ``main.cpp`` again as ninja would (optionally with a precompiled
    ``torch/extension.h`` included first), into a throwaway object."""
    values = ninja_variables(build)
    argv = [
        *shlex.split(values["cxx"]),
        "-MMD",
        "-MF",
        "/dev/null",
        *shlex.split(values.get("cflags", "")),
    ]
    if pch is not None:
        argv += ["-Winvalid-pch", "-include", str(pch / "torch" / "extension.h")]
    argv += [
        "-c",
        "main.cpp",
        "-o",
        str(build / "again.o"),
        *shlex.split(values.get("post_cflags", "")),
    ]
    rc, wall, cpu, tail = cpu_seconds_of(argv, build, limit)
    result = {"rc": rc, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}
    if pch is not None:
        result["pch_used"] = rc == 0 and "not used" not in tail and "invalid" not in tail
        if not result["pch_used"]:
            result["tail"] = tail[-300:]
    return result


def precompiled_header(build: Path, cache: Path, limit: float) -> tuple[Path, dict[str, Any]]:
    """``torch/extension.h`` precompiled with this build's flags, under ``cache`` (one folder
    per flag set); how long building it took, when this call built it."""
    values = ninja_variables(build)
    flags = shlex.split(values.get("cflags", "")) + shlex.split(values.get("post_cflags", ""))
    flags = [f for f in flags if not f.startswith("-DTORCH_EXTENSION_NAME")]
    key = hashlib.sha256("\0".join([values["cxx"], *flags]).encode()).hexdigest()[:16]
    folder = cache / key
    header = folder / "torch" / "extension.h"
    if (folder / "torch" / "extension.h.gch").exists():
        return folder, {"key": key, "built_now": False}
    import torch

    header.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(torch.__file__).parent / "include" / "torch" / "extension.h", header)
    argv = [*shlex.split(values["cxx"]), *flags, "-x", "c++-header", str(header), "-o"]
    argv.append(str(header) + ".gch")
    rc, wall, cpu, tail = cpu_seconds_of(argv, folder, limit)
    size = (folder / "torch" / "extension.h.gch").stat().st_size if rc == 0 else 0
    info = {"key": key, "built_now": True, "rc": rc, "wall_s": round(wall, 2)}
    info |= {"cpu_s": round(cpu, 2), "bytes": size}
    if rc != 0:
        info["tail"] = tail[-300:]
    return folder, info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("corpus", type=Path, help="a CUDA-L1 .jsonl file")
    parser.add_argument("--records", type=int, default=16, help="records that call load_inline")
    parser.add_argument("--skip", type=int, default=0, help="such records to pass over first")
    parser.add_argument("--jobs", type=int, default=4, help="candidates built side by side")
    parser.add_argument("--pch", action="store_true", help="time main.cpp with a PCH too")
    parser.add_argument("--limit", type=float, default=240.0, help="seconds a build may take")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args()
    chosen = [
        r
        for r in read_cuda_l1(args.corpus)
        if r.unreadable is None and "load_inline" in (r.candidate_source or "")
    ][args.skip : args.skip + args.records]
    work = Path(tempfile.mkdtemp(prefix="build-split-"))
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        rows = list(
            pool.map(
                lambda r: build_record(r.id, r.candidate_source or "", work, args.limit), chosen
            )
        )
    result: dict[str, Any] = {
        "schema": SCHEMA,
        "date": time.strftime("%Y-%m-%d"),
        "code": code_commit(),
        "torch": package_version("torch"),
        "cpus": os.cpu_count(),
        **gpu_description(),
        "corpus": args.corpus.name,
        "jobs": args.jobs,
        "build_wall_s": round(time.perf_counter() - started, 1),
        "rows": rows,
    }
    if args.pch:
        cache = work / "pch"
        headers, pairs = [], []
        for row in rows:  # headers one at a time: each is built once per flag set
            build = Path(row.get("build_dir", "/nonexistent"))
            if row.get("outcome") != "built" or not (build / "main.cpp").exists():
                continue
            folder, info = precompiled_header(build, cache, args.limit)
            if info.get("built_now"):
                headers.append(info)
            if info.get("rc", 0) == 0:
                pairs.append((row, build, folder))

        def both(pair: tuple[dict[str, Any], Path, Path]) -> None:
            row, build, folder = pair
            row["cpp_plain"] = compile_cpp(build, None, args.limit)
            row["cpp_pch"] = compile_cpp(build, folder, args.limit)

        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            list(pool.map(both, pairs))
        result["headers"] = headers
    summarise(result)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))
    return 0


def summarise(result: dict[str, Any]) -> None:
    """Totals over the built records: seconds in each kind of step, and the C++ step's CPU
    with and without the precompiled header."""
    built = [r for r in result["rows"] if r.get("outcome") == "built"]
    kinds: dict[str, float] = {}
    for row in built:
        for output, seconds in row.get("steps_s", {}).items():
            kind = "cuda" if ".cuda." in output else "cpp" if output.endswith(".o") else "link"
            kinds[kind] = round(kinds.get(kind, 0.0) + seconds, 2)
    outcomes: dict[str, int] = {}
    for row in result["rows"]:
        outcomes[row.get("outcome", "?")] = outcomes.get(row.get("outcome", "?"), 0) + 1
    summary: dict[str, Any] = {"outcomes": outcomes, "step_wall_s_over_built": kinds}
    summary["import_cpu_s_total"] = round(sum(r.get("cpu_s", 0.0) for r in result["rows"]), 1)
    paired = [r for r in built if "cpp_pch" in r and r["cpp_pch"].get("pch_used")]
    if paired:
        plain = sum(r["cpp_plain"]["cpu_s"] for r in paired)
        pch = sum(r["cpp_pch"]["cpu_s"] for r in paired)
        summary["cpp_cpu_s_plain"] = round(plain, 1)
        summary["cpp_cpu_s_pch"] = round(pch, 1)
        summary["cpp_pch_over_plain"] = round(pch / plain, 3) if plain else None
        summary["pch_records"] = len(paired)
    result["summary"] = summary


if __name__ == "__main__":
    raise SystemExit(main())
