"""kernelgate: contract-grade verification of GPU kernels.

``kernelgate.verify(reference, candidate)`` judges a candidate against a reference program
under a contract and returns a ``Verdict`` with evidence for every gate.
"""

from kernelgate import bytecode

bytecode.use_cache()  # before torch is imported: see bytecode.py

from kernelgate.contract.spec import Contract  # noqa: E402
from kernelgate.errors import CandidateLoadError, KernelgateError  # noqa: E402
from kernelgate.pipeline import verify  # noqa: E402
from kernelgate.verdict import Outcome, Verdict  # noqa: E402

__version__ = "0.1.0"
__all__ = ["CandidateLoadError", "Contract", "KernelgateError", "Outcome", "Verdict", "verify"]
