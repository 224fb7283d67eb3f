"""One calibration entry in a process of its own: ``python -m kernelgate.redteam.child``.

Why a fresh process per entry (``runner.calibrate``): a process pool shared by every entry
stalled on a device with work still queued, and one entry that never finishes would hold a
pool slot, and the calibration, for ever. A child per entry can be given a wall-clock limit
and killed with its whole tree, and a crash in it costs that one row.

The child runs ``runner.run_entry`` and writes the ``EntryResult`` as JSON
(``EntryResult.to_dict``) to the file named on its command line, through a temporary name so
that the parent never reads half a result. Everything the verification prints goes to the
child's stdout and stderr, which the parent keeps for an error row.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    """Parse ``NAME DEVICE TIMEOUT OUT [--intended-only]``, verify the entry, write its row."""
    parser = argparse.ArgumentParser(prog="python -m kernelgate.redteam.child")
    parser.add_argument("name", help="the catalog entry")
    parser.add_argument("device")
    parser.add_argument("timeout", type=float, help="seconds per candidate call (verify's)")
    parser.add_argument("out", type=Path, help="where the EntryResult's JSON goes")
    parser.add_argument("--intended-only", action="store_true")
    args = parser.parse_args(argv)

    from kernelgate.audit.processes import die_with_audit_parent

    die_with_audit_parent()  # a calibration killed outright takes its children with it

    from kernelgate.redteam.catalog import entries
    from kernelgate.redteam.runner import run_entry

    (entry,) = entries([args.name])
    result = run_entry(entry, args.device, args.timeout, args.intended_only)
    partial = args.out.with_name(args.out.name + ".partial")
    partial.write_text(json.dumps(result.to_dict()))
    partial.replace(args.out)


if __name__ == "__main__":
    main()
