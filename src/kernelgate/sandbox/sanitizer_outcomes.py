"""The compute-sanitizer tools RES-01 runs and the outcomes a run can have.

A module of its own, free of torch, so that the audit's rows and report (which never run a
candidate) can name them without importing the worker machinery of ``sanitizer.py``.
"""

# cheapest first, so that a record's shared budget is not spent before a cheap tool runs:
# on an H100 (CUDA-L1 h100, 2026-12-05) memcheck took 5.1 s, racecheck 7.4 s and initcheck
# ran past its share (47.7 s) every time, leaving synccheck nothing when it came third
TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
# SanitizerRun.status: the first three ran to their summary; the rest did not
RAN = ("clean", "findings", "other-findings")
NOT_RAN = ("inconclusive", "out-of-budget", "not-run")
DEFAULT_BUDGET_S = 90.0  # seconds for all tools of one record in an audit (``--sanitize-seconds``)
