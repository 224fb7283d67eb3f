"""docs/environment.md names every KERNELGATE_* environment variable the source reads."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAME = re.compile(r"KERNELGATE_[A-Z0-9_]*[A-Z0-9]")
# Not environment variables: a name candidates declare, and a template's placeholder.
NOT_VARIABLES = {"KERNELGATE_KNOBS", "KERNELGATE_HOSTILE_ARENA"}


def test_every_variable_in_the_source_is_in_the_table() -> None:
    found = {
        name
        for path in (ROOT / "src" / "kernelgate").rglob("*.py")
        for name in NAME.findall(path.read_text())
    }
    documented = set(NAME.findall((ROOT / "docs" / "environment.md").read_text()))
    assert len(found) > 10  # the search itself works
    assert sorted(found - NOT_VARIABLES - documented) == []
