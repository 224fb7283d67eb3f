"""Performance acceptance: speedup over the reference, measured by the judge (docs/perf.md).

``timing`` runs in the worker (the candidate's process) with functions captured before any
candidate code is imported; ``measure`` runs in the judge: it makes the inputs, checks the
outputs of sampled timed calls against the oracle and turns the times into a report.
"""
