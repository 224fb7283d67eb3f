"""Seconds per candidate call through the pipe and through CUDA IPC (issue 19, data path).

One worker session per data path, one candidate (relu of one fp32 input), an input of
``--numel`` elements (67,108,864 by default: 268 MB, KernelBench's RMSNorm record T36)
placed in guarded storage as the gates place it. Each path is timed for calls that bring
back only the outputs (most gates) and for calls that bring back the inputs after the call
and the call's allocations too (MEM-01), and each call's output is checked against relu of
the input, on the judge's side. Run on the H200::

    PYTHONPATH=src python benchmarks/wire_path.py --json benchmarks/results/wire-path-h200.json

``--path pipe`` (or ``ipc``) times one path only; ``KERNELGATE_WIRE=pipe`` is what forces
the pipe, as in any verification.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import torch
import typer

from kernelgate.inputs.placement import GUARD_BYTES, PlacedTensor
from kernelgate.sandbox import cuda_ipc, wire
from kernelgate.sandbox.session import WorkerSession

SCHEMA = "kernelgate.wire-path/1"
CANDIDATE = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""


def time_path(
    path: str, candidate: Path, placed: PlacedTensor, calls: int, side_effects: bool
) -> dict[str, Any]:
    """Per-call seconds on ``path`` ("pipe" or "cuda-ipc"), with a fresh session."""
    if path == cuda_ipc.PIPE:
        os.environ[cuda_ipc.ENV_SWITCH] = cuda_ipc.PIPE
    else:
        os.environ.pop(cuda_ipc.ENV_SWITCH, None)
    want = torch.relu(placed.view()).cuda()
    seconds, started_at = [], time.monotonic()
    with WorkerSession(candidate, [], device="cuda", timeout=600) as session:
        load_s = time.monotonic() - started_at
        for _ in range(calls):
            started = time.monotonic()
            result = session.call(
                [placed.as_wire()], poison=0xFF, guard_bytes=GUARD_BYTES, side_effects=side_effects
            )
            out = result.outputs
            assert isinstance(out, wire.WireTensor)
            seconds.append(time.monotonic() - started)
            if not torch.equal(out.view().to(want.device), want):
                raise SystemExit(f"{path}: the output is not relu of the input")
        report = session.data_path_report()
    return {
        "requested": path,
        "data_path": report,
        "side_effects": side_effects,
        "load_s": round(load_s, 3),
        "call_s": [round(s, 4) for s in seconds],
        "median_call_s": round(statistics.median(seconds), 4),
        "output_device": str(out.storage.device),
    }


def main(
    json_out: Annotated[Path | None, typer.Option("--json", help="where the JSON goes")] = None,
    numel: Annotated[int, typer.Option(help="fp32 elements of the input")] = 1 << 26,
    calls: Annotated[int, typer.Option(help="calls per path and mode")] = 5,
    path: Annotated[str, typer.Option(help="pipe, ipc or both")] = "both",
) -> None:
    if not torch.cuda.is_available():
        raise SystemExit("wire_path.py needs a CUDA device")
    paths = {"pipe": [cuda_ipc.PIPE], "ipc": [cuda_ipc.IPC]}.get(
        path, [cuda_ipc.PIPE, cuda_ipc.IPC]
    )
    values = torch.rand(numel, generator=torch.Generator().manual_seed(0)) - 0.5
    placed = PlacedTensor.place(values)
    runs = []
    with tempfile.TemporaryDirectory() as folder:
        candidate = Path(folder) / "relu.py"
        candidate.write_text(CANDIDATE)
        for name in paths:
            for side_effects in (False, True):
                run = time_path(name, candidate, placed, calls, side_effects)
                runs.append(run)
                print(
                    f"{name:9s} side_effects={side_effects!s:5s} -> {run['data_path']['path']:9s}"
                    f" median {run['median_call_s']:.4f} s/call  {run['call_s']}"
                )
    result = {
        "schema": SCHEMA,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "input": {"numel": numel, "dtype": "float32", "storage_bytes": placed.storage.nbytes},
        "runs": runs,
    }
    text = json.dumps(result, indent=2)
    if json_out is None:
        print(text)
    else:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(text + "\n")


if __name__ == "__main__":
    typer.run(main)
