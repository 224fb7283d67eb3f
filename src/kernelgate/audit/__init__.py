"""Audit a corpus of already-accepted kernels: the source harness's own check re-run side by
side with the contract, a resumable store, and HTML/Markdown reports (see docs/audit.md).

Entry point: ``kernelgate.audit.runner.run_audit``. Nothing is imported here, so the child
processes (``python -m kernelgate.audit.judge`` / ``.oldcheck``) start without loading the
runner, and without runpy's double-import warning.
"""
