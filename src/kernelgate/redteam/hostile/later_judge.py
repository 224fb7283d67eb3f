"""Honest (template): the candidate a *later* judge sees after an attack, in the same arena.

It computes the right answer, unless its worker started with process-wide state an earlier
candidate could have changed (a torch setting off its default, entries in HOME for CUDA's and
torch's caches): then it fails at import, naming what changed. An attack got through to
later judges if this candidate is not verified.

A cache counts as poisoned by its files, not by its folder: the CUDA driver makes an empty
``~/.nv/ComputeCache`` itself when the judge (whose HOME is the arena's) starts CUDA, so on a
device the folder is there after every honest judge.
"""

import os

import torch
import torch.nn as nn

from kernelgate.redteam.hostile import kit

ARENA = kit.Arena.rendered("__KERNELGATE_HOSTILE_ARENA__")

DEFAULTS = {
    "matmul.allow_tf32": (lambda: torch.backends.cuda.matmul.allow_tf32, False),
    "cudnn.allow_tf32": (lambda: torch.backends.cudnn.allow_tf32, True),
    "float32_matmul_precision": (torch.get_float32_matmul_precision, "highest"),
    "fp16_reduced_precision_reduction": (
        lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        True,
    ),
    "cudnn.benchmark": (lambda: torch.backends.cudnn.benchmark, False),
    "default_dtype": (torch.get_default_dtype, torch.float32),
}
LEFT_IN_HOME = (".nv/ComputeCache", ".cache/torch/kernels")


def _changed() -> list[str]:
    changed = [
        f"{name}={read()!r}" for name, (read, default) in DEFAULTS.items() if read() != default
    ]
    tiny = torch.tensor([1e-40], dtype=torch.float32)
    if float(tiny * 1.0) == 0.0:
        changed.append("denormals flushed")
    for relative in LEFT_IN_HOME:
        entries = _files_under(os.path.join(ARENA.home, relative))
        if entries:
            changed.append(f"~/{relative} holds {', '.join(entries[:3])}")
    return changed


def _files_under(folder: str) -> list[str]:
    """Files below ``folder`` (relative to it); none if it is missing or holds only folders."""
    return sorted(
        os.path.relpath(os.path.join(parent, name), folder)
        for parent, _, names in os.walk(folder)
        for name in names
    )


CHANGED = _changed()
if CHANGED:  # the exception's text reaches the later verdict's evidence (RES-01)
    raise RuntimeError(kit.report(ARENA, "later-state-changed", True, "; ".join(CHANGED)))


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a + b
