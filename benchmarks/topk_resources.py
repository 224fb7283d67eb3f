"""Registers and spills of the honest top-k candidate, every specialization, offline for sm_90.

RES-02 rejects a kernel that spills (budget 0 bytes). The judge compiles what a candidate
launches: on the device, with the device's Triton (3.6 on the H200); on the CPU, the
interpreted launches' specializations offline with the local Triton. The top-k control
once passed the CPU judge and then spilled on the H200, so this script checks a spread of
shapes (k, width, rows, dtype, an offset input) under whichever Triton is importable.

Two steps, because the compile must run where Triton was never imported under the
interpreter (``compile_records``'s rule):

  TRITON_INTERPRET=1 PYTHONPATH=src .venv/bin/python benchmarks/topk_resources.py record
  PYTHONPATH=/tmp/tr36site:src .venv/bin/python benchmarks/topk_resources.py compile
  PYTHONPATH=src .venv/bin/python benchmarks/topk_resources.py compile

``record`` writes the launch records (for the CPU's launches and, with the forward's
``is_cuda`` branch taken, the device's; one group when they are the same) to a temporary file;
``compile`` compiles each for sm_90 and adds this Triton's figures to
``benchmarks/results/topk-resources-cpu.json``. Spills are counted twice: by ptxas with the
flags every Triton passes (the CPU judge's reading) and with this Triton's own flags (the
device judge's reading, when this Triton is the device's).
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
RECORDS = Path(tempfile.gettempdir()) / "kernelgate-topk-records.json"  # between the steps
OUTPUT = RESULTS / "topk-resources-cpu.json"
CANDIDATES = {
    "control": ROOT / "src" / "kernelgate" / "redteam" / "controls" / "topk.py",
    "example": ROOT / "examples" / "topk" / "honest.py",  # a link to the control today
}
KS = (1, 2, 8, 17, 64)  # the reference's 8, CMP-03's 1 and 17, extremes
# every power-of-two tile from 1 to 1024 but 2 (CMP-03's 11 and 63 among them), rows of
# one tile and of several
WIDTHS = (1, 3, 8, 11, 17, 63, 64, 100, 256, 257, 1024, 1025, 4096)
ROWS = (1, 14)  # 1: n_rows specialized to a constant; 14: the reference's batch
DTYPES = ("float32", "bfloat16", "float16")


def record() -> None:
    """Record every distinct launch of each candidate over the spread (kernels not run)."""
    import torch
    from triton.runtime.interpreter import InterpretedFunction

    from kernelgate.sandbox import resources
    from kernelgate.sandbox.resources import LaunchRecorder

    InterpretedFunction.run = lambda self, *a, **k: None  # only the specialization matters
    resources.MAX_RECORDS = 100_000
    recorder = LaunchRecorder()
    recorder.install(interpreter=True)
    out: dict[str, list[dict[str, Any]]] = {}
    for label, path in CANDIDATES.items():
        if label != "control" and path.read_bytes() == CANDIDATES["control"].read_bytes():
            print(f"{label}: the same file as the control, not compiled twice", flush=True)
            continue
        spec = importlib.util.spec_from_file_location(f"topk_{label}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for device in ("cpu", "cuda"):
            recorder.seen.clear()  # each device's launches in full, even where they repeat
            cuda_flag = torch.Tensor.is_cuda
            if device == "cuda":  # the forward's device branch, without a device
                torch.Tensor.is_cuda = property(lambda self: True)  # type: ignore[method-assign]
            try:
                for k in KS:
                    for width in WIDTHS:
                        if width < k:
                            continue
                        for rows in ROWS:
                            for dtype in DTYPES:
                                for offset in (0, 1):
                                    base = torch.zeros(
                                        rows * width + offset, dtype=getattr(torch, dtype)
                                    )
                                    x = base[offset:].view(rows, width)
                                    module.ModelNew(k)(x)
            finally:
                torch.Tensor.is_cuda = cuda_flag  # type: ignore[method-assign]
            records = [r for r in recorder.drain() if r.get("backend") == "triton-interpreter"]
            for r in records:
                r["file"] = str(path)
            if out.get(f"{label}/cpu") == records:  # no device branch: compile them once
                out[f"{label}/cpu+cuda"] = out.pop(f"{label}/cpu")
            else:
                out[f"{label}/{device}"] = records
            print(f"{label}/{device}: {len(records)} specializations", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    RECORDS.write_text(json.dumps(out, indent=1) + "\n")


def compile_all() -> None:
    """Compile every recorded specialization for sm_90 with the importable Triton."""
    os.environ.pop("TRITON_INTERPRET", None)
    import triton
    from triton.backends.compiler import BaseBackend, GPUTarget
    from triton.compiler import ASTSource

    from kernelgate.sandbox import resources

    version = triton.__version__
    groups = json.loads(RECORDS.read_text())
    mine: dict[str, Any] = {}
    for group, records in groups.items():
        label = group.split("/")[0]
        spec = importlib.util.spec_from_file_location(f"compiled_{label}", CANDIDATES[label])
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        rows: list[dict[str, Any]] = []
        with tempfile.TemporaryDirectory() as tmp:
            for r in records:
                jit = resources._find_jit(module, r["name"], r["file"])
                names = list(r["signature"])
                attrs = {
                    (names.index(k),): BaseBackend.parse_attr(v)
                    for k, v in r.get("attrs", {}).items()
                }
                source = ASTSource(jit, dict(r["signature"]), dict(r["constexprs"]), attrs)
                compiled = triton.compile(
                    source, target=GPUTarget("cuda", 90, 32), options=dict(r.get("options", {}))
                )
                cubin = Path(tmp) / "k.cubin"
                cubin.write_bytes(compiled.asm["cubin"])
                usage = resources.dump_resource_usage(str(cubin))[0][0]
                ptx = compiled.asm.get("ptx", "")
                direct, _ = resources.ptxas_usage(ptx, compiled.metadata, 90, triton_flags=False)
                own, _ = resources.ptxas_usage(ptx, compiled.metadata, 90, triton_flags=True)
                rows.append(
                    {
                        "x": r["signature"]["x_ptr"],
                        "attrs": r.get("attrs", {}),
                        "constexprs": r["constexprs"],
                        "num_warps": int(compiled.metadata.num_warps),
                        "registers": usage["registers"],
                        "spill_bytes_common_flags": direct and direct["spill_store_bytes"],
                        "spill_bytes_own_flags": own and own["spill_store_bytes"],
                    }
                )
        worst = {
            "specializations": len(rows),
            "max_registers": max(x["registers"] for x in rows),
            "max_spill_bytes_common_flags": max(x["spill_bytes_common_flags"] for x in rows),
            "max_spill_bytes_own_flags": max(x["spill_bytes_own_flags"] for x in rows),
        }
        print(f"triton {version} {group}: {worst}", flush=True)
        spilling = [x for x in rows if x["spill_bytes_common_flags"] or x["spill_bytes_own_flags"]]
        for x in spilling[:10]:
            print("  spills:", x, flush=True)
        mine[group] = {"worst": worst, "specializations": rows}
    report = json.loads(OUTPUT.read_text()) if OUTPUT.exists() else {}  # the other version's
    report[f"triton {version}"] = mine
    OUTPUT.write_text(_dumps(report) + "\n")


def _dumps(report: dict[str, Any]) -> str:
    """Indented JSON with one line per specialization (a few hundred of them)."""
    lists: dict[str, str] = {}
    shallow: dict[str, Any] = {}
    for version, groups in report.items():
        shallow[version] = {}
        for group, entry in groups.items():
            mark = f"@{version}/{group}@"
            lists[json.dumps(mark)] = (
                "[\n" + ",\n".join(json.dumps(r) for r in entry["specializations"]) + "\n]"
            )
            shallow[version][group] = {**entry, "specializations": mark}
    text = json.dumps(shallow, indent=1)
    for mark, rows in lists.items():
        text = text.replace(mark, rows)
    return text


if __name__ == "__main__":
    {"record": record, "compile": compile_all}[sys.argv[1]]()
