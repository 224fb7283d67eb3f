"""The judge's own arithmetic on a large RMSNorm, profiled on the CPU (issue 19).

KernelBench's RMSNorm (L1/T36: 67M fp32 elements) verified in 180 s on the H200 against a
5 s harness check, and much of that was the judge's CPU work: per-row loops drawing ORD-01's
cancellation inputs, a whole permutation for EXC-01's scattered specials, class masks built
by boolean indexing. This writes a reference and an honest pure-PyTorch candidate of that
shape (smaller: ``--elements``) into a temporary folder and runs ``verify`` on the CPU under
cProfile, printing the whole verdict's seconds and the functions by cumulative and own time::

    PYTHONPATH=src python benchmarks/profile_large_rmsnorm.py --elements 8388608
"""

from __future__ import annotations

import cProfile
import io
import pstats
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

from kernelgate.pipeline import verify

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

REFERENCE = """
import torch
import torch.nn as nn

batch_size = {batch}
features = 64
dim1 = {side}
dim2 = {side}


class Model(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x):
        rms = torch.sqrt(torch.mean(x ** 2, dim=1, keepdim=True) + self.eps)
        return x / rms


def get_inputs():
    return [torch.randn(batch_size, features, dim1, dim2)]


def get_init_inputs():
    return [features]
"""

CANDIDATE = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(dim=1, keepdim=True) + self.eps)
"""


@app.command()
def main(
    elements: Annotated[int, typer.Option(help="Input elements (batch x 64 x side x side).")] = (
        1 << 23
    ),
    shown: Annotated[int, typer.Option(help="Functions listed per ordering.")] = 40,
    only: Annotated[str, typer.Option(help="Comma-separated gate ids; all if empty.")] = "",
) -> None:
    side = 64
    batch = max(1, elements // (64 * side * side))
    with tempfile.TemporaryDirectory() as folder:
        reference, candidate = Path(folder, "reference.py"), Path(folder, "candidate.py")
        reference.write_text(REFERENCE.format(batch=batch, side=side))
        candidate.write_text(CANDIDATE)
        profile = cProfile.Profile()
        started = time.monotonic()
        profile.enable()
        verdict = verify(reference, candidate, device="cpu", only=only.split(",") if only else None)
        profile.disable()
        seconds = time.monotonic() - started
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("cumulative").print_stats(shown)
    stats.sort_stats("tottime").print_stats(shown)
    print(out.getvalue())
    gates = {g.id: (g.status.value, round(g.seconds, 2)) for g in verdict.gates}
    total = batch * 64 * side * side
    print(f"elements {total}: verdict {verdict.verdict.value} in {seconds:.1f} s")
    print(gates)


if __name__ == "__main__":
    app()
