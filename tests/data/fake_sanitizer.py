"""A stand-in for compute-sanitizer in CPU tests (``tests/test_resources.py``).

It runs its target and then writes the summary line to ``--log-file``, but only when the
target was confined loosely enough: ``FAKE_SANITIZER_NEEDS`` names the mechanisms the judge
must skip (read from the confinement launcher's policy on the command line), as the real
sanitizer writes no summary for a target it never instrumented.
"""

import json
import os
import subprocess
import sys

args = sys.argv[1:]
options = {}
while args and args[0].startswith("--"):
    options[args[0]], args = args[1], args[2:]
status = subprocess.call(args, close_fds=False)
needs = [name for name in os.environ.get("FAKE_SANITIZER_NEEDS", "").split(",") if name]
confined = "--" in args  # [python, -P, confine.py, POLICY, --, worker...]
skipped = json.loads(args[args.index("--") - 1])["skip"] if confined else None
if skipped is None or all(name in skipped for name in needs):
    with open(options["--log-file"], "w") as log:
        log.write("========= ERROR SUMMARY: 0 errors\n")
sys.exit(status)
