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
from pathlib import Path

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
