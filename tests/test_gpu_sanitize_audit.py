"""A device audit sanitizes the records whose candidates launch kernels of their own, and
RES-02 reads those kernels' resources (issue 24, parts 1 and 2). Two load_inline
candidates of one reference: an honest one, and one whose kernel also writes one element
past its output (an overrun the caching allocator's slack would hide from memcheck; the
sanitized worker runs without the cache, sandbox/sanitizer.py). GPU only:

    PYTHONPATH=src .venv/bin/python -m pytest -q -m gpu tests/test_gpu_sanitize_audit.py
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kernelgate.audit.store import STORE_NAME

REFERENCE = """
import torch
import torch.nn as nn

rows = 64
cols = 1001  # 256256 bytes: y[n] falls in the allocator's 512-byte rounding


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
"""

CANDIDATE = '''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>

__global__ void relu_twice_kernel(const float* x, float* y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        float v = x[i];
        y[i] = v < 0.f ? 0.f : v * 2.f;  // as torch.relu: NaN and -0.0 kept
    }
    OVERRUN
}

torch::Tensor relu_twice(torch::Tensor x) {
    auto xc = x.contiguous();
    auto y = torch::empty_like(xc);
    long n = xc.numel();
    int threads = 256;
    relu_twice_kernel<<<(n + threads - 1) / threads, threads>>>(
        xc.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""

_module = load_inline(
    name="NAME",
    cpp_sources="torch::Tensor relu_twice(torch::Tensor x);",
    cuda_sources=CUDA_SOURCE,
    functions=["relu_twice"],
    verbose=False,
)


class ModelNew(nn.Module):
    def forward(self, x):
        return _module.relu_twice(x)
'''

CANDIDATES = {
    "honest": CANDIDATE.replace("OVERRUN", "").replace("NAME", "kg_relu_twice_honest"),
    # thread 0 of block 0 also writes y[n]: past the output, inside the allocator's slack
    "oob_write": CANDIDATE.replace("OVERRUN", "if (i == 0) y[n] = 0.f;").replace(
        "NAME", "kg_relu_twice_oob"
    ),
}


def _audit(corpus: Path, out: Path) -> dict[str, dict[str, Any]]:
    done = subprocess.run(
        [
            *(sys.executable, "-m", "kernelgate.cli", "audit", str(corpus), "--out", str(out)),
            *("--device", "cuda", "--workers", "1", "--format", "pairs"),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    with sqlite3.connect(out / STORE_NAME) as db:
        return {i: json.loads(d) for i, d in db.execute("SELECT id, data FROM rows")}


@pytest.mark.gpu
def test_device_audit_sanitizes_authored_kernels_and_reads_their_resources(
    tmp_path: Path,
) -> None:
    corpus = tmp_path / "corpus"
    for name, source in CANDIDATES.items():
        (corpus / name).mkdir(parents=True)
        (corpus / name / "reference.py").write_text(REFERENCE)
        (corpus / name / "candidate.py").write_text(source)
    rows = _audit(corpus, tmp_path / "out")
    for name, row in rows.items():
        assert row["stage"] == "gates", (name, row["reason"])
        assert row["authored_kernels"] == 1, name
        assert row["res02"]["status"] == "pass", (name, row["gates"])
        tools = row["sanitizer"]["tools"]
        assert list(tools) == ["memcheck", "racecheck", "synccheck", "initcheck"], name
        assert all(t["ran"] for t in tools.values()), (name, tools)
    assert rows["honest"]["verdict"] == "verified", rows["honest"]["gates"]
    honest_tools = rows["honest"]["sanitizer"]["tools"].values()
    assert not any(t["status"] == "findings" for t in honest_tools), honest_tools
    oob = rows["oob_write"]
    assert oob["sanitizer"]["tools"]["memcheck"]["status"] == "findings"
    assert "RES-01" in oob["failed_gates"] and oob["verdict"] != "verified"
    evidence = json.loads(Path(oob["evidence"]).read_text())
    res01 = next(g for g in evidence["gates"] if g["id"] == "RES-01")
    report = next(f for f in res01["counterexample"]["findings"] if f["tool"] == "memcheck")
    assert "relu_twice_kernel" in report["report"] and "Host Frame" not in report["report"]
    res02 = next(g for g in evidence["gates"] if g["id"] == "RES-02")
    kernels = res02["evidence"]["kernels"]
    assert {k["name"] for k in kernels} == {"relu_twice_kernel"}, kernels
    assert all(k["symbol"].startswith("_Z") and 0 < k["registers"] <= 255 for k in kernels)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    memcheck = summary["sanitizers"]["tools"]["memcheck"]
    assert (memcheck["eligible"], memcheck["ran"], memcheck["findings"]) == (2, 2, 1), memcheck
    assert memcheck["total_s"] > 0
    assert summary["res02_coverage"]["ran"] == 2
