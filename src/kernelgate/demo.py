"""The built-in demonstration: verify every example candidate and check it met expectations.

An example folder holds a reference, candidates and ``expected.toml`` naming, for each
candidate, the verdict it must get and the gate that must reject it.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from kernelgate.errors import KernelgateError
from kernelgate.verdict import Verdict

DEFAULT_EXAMPLES = Path("examples/softmax")


@dataclass
class Expectation:
    file: Path
    verdict: str
    gate: str | None = None

    def met_by(self, verdict: Verdict) -> bool:
        if verdict.verdict.value != self.verdict:
            return False
        return self.gate is None or self.gate in verdict.failed_gates


def intended_gates(gate: str | None) -> list[str] | None:
    """The gates to run to see ``gate`` reject a defect (None: all of them).

    RES-01 judges the incidents of other gates' calls, so it needs one gate that calls the
    candidate beside it.
    """
    if gate is None:
        return None
    return ["CMP-01", "RES-01"] if gate == "RES-01" else [gate]


def read_expectations(folder: Path) -> tuple[Path, list[Expectation]]:
    manifest = folder / "expected.toml"
    if not manifest.is_file():
        raise KernelgateError(f"no expected.toml in {folder}; the demo needs an example folder")
    data = tomllib.loads(manifest.read_text())
    return folder / data["reference"], [
        Expectation(folder / c["file"], c["verdict"], c.get("gate")) for c in data["candidate"]
    ]
