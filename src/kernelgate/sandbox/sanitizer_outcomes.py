"""The compute-sanitizer tools RES-01 runs and the outcomes a run can have.

A module of its own, free of torch, so that the audit's rows and report (which never run a
candidate) can name them without importing the worker machinery of ``sanitizer.py``.
"""

TOOLS = ("memcheck", "racecheck", "initcheck", "synccheck")
# SanitizerRun.status: the first three ran to their summary; the rest did not
RAN = ("clean", "findings", "other-findings")
NOT_RAN = ("inconclusive", "out-of-budget", "not-run")
DEFAULT_BUDGET_S = 60.0  # seconds for all tools of one record in an audit (``--sanitize-seconds``)
