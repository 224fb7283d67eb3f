"""A tiny synthetic corpus for the audit tests, written as files by ``write_pairs``.

Every candidate is plain PyTorch on a (4, 7) input (fast on the CPU); each one exercises one
path of the audit: honest, a NaN swallower the old check accepts but the contract rejects,
a syntax error, a missing ModelNew, a crash, a hang, and a reference without a candidate.
"""

from __future__ import annotations

from pathlib import Path

REFERENCE = """
import torch
import torch.nn as nn

rows = 4
cols = 7


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x) * 2.0


def get_inputs():
    return [torch.randn(rows, cols)]


def get_init_inputs():
    return []
"""

HEADER = "import torch\nimport torch.nn as nn\n\n\n"


def _candidate(body: str) -> str:
    return (
        HEADER
        + "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
        + "    def forward(self, x):\n"
        + "".join(f"        {line}\n" for line in body.strip().splitlines())
    )


CANDIDATES = {
    "honest": _candidate("return torch.clamp(x, min=0) * 2.0"),
    "nan_swallow": _candidate("return torch.nan_to_num(torch.relu(x) * 2.0)"),
    "syntax_error": HEADER + "class ModelNew(nn.Module)\n    pass\n",
    "no_modelnew": HEADER + "class Model2(nn.Module):\n    pass\n",
    "crash": _candidate("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)"),
    "hang": _candidate("while True:\n    pass"),
}

EXPECTED = {  # id -> (contract verdict, old check at 1e-2)
    "honest": ("verified", "accepted"),
    "nan_swallow": ("rejected", "accepted"),
    "syntax_error": ("rejected", "rejected"),
    "no_modelnew": ("rejected", "rejected"),
    "crash": ("rejected", "rejected"),
    "hang": ("rejected", "rejected"),
    "orphan": ("unreadable", "not-run"),
}


def write_pairs(folder: Path, names: list[str] | None = None) -> Path:
    """Write the corpus as a pairs folder: subfolders for some, flat files for others."""
    folder.mkdir(parents=True, exist_ok=True)
    for index, name in enumerate(names or list(CANDIDATES)):
        if index % 2 == 0:
            (folder / name).mkdir()
            (folder / name / "reference.py").write_text(REFERENCE)
            (folder / name / "candidate.py").write_text(CANDIDATES[name])
        else:
            (folder / f"{name}_ref.py").write_text(REFERENCE)
            (folder / f"{name}_new.py").write_text(CANDIDATES[name])
    if names is None:
        (folder / "orphan_ref.py").write_text(REFERENCE)
    return folder
