"""kernelgate: contract-grade verification of GPU kernels.

``kernelgate.verify(reference, candidate)`` judges a candidate against a reference program
under a contract and returns a ``Verdict`` with evidence for every gate.
"""

from kernelgate.contract.spec import Contract
from kernelgate.errors import CandidateLoadError, KernelgateError
from kernelgate.pipeline import verify
from kernelgate.verdict import Outcome, Verdict

__version__ = "0.1.0"
__all__ = ["CandidateLoadError", "Contract", "KernelgateError", "Outcome", "Verdict", "verify"]
