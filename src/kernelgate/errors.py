"""Errors that end a run before any gate can judge (exit code 2 on the command line).

They carry a one-line message that says what is wrong and what to do; the CLI prints it
without a traceback.
"""


class KernelgateError(Exception):
    """Base: a usage or harness error, not a verdict about the candidate."""


class ReferenceError_(KernelgateError):
    """The reference program cannot be read or run."""


class UnsupportedDtypeError(ReferenceError_):
    """The reference hands the judge a tensor of a dtype it cannot judge (quantized, bits,
    sub-byte, complex32: see ``sandbox.wire.DTYPES``); the message names the dtype and where
    it was found. Only the reference's values reach the judge's encoder: a candidate output
    of such a dtype fails in the worker and is judged (RES-01)."""


class CandidateLoadError(KernelgateError):
    """The candidate file cannot be parsed, lacks ``ModelNew``, or fails to import/construct."""


class CandidateBuildError(CandidateLoadError):
    """A build the candidate started (a torch extension, a Triton kernel) failed, or ran
    past the compile budget (``--compile-timeout``), at import or in a call: a load-stage
    result, never an execution incident of RES-01 (the kernel never ran)."""


class ContractError(KernelgateError):
    """A contract file is malformed or does not fit the reference."""
