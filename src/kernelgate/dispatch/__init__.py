"""Runtime dispatch: call a judged kernel only inside the domain its verdict covers.

``guarded(reference, candidate, evidence, device=...)`` returns a ``torch.nn.Module`` that
answers each call with the candidate when the inputs lie inside the verified (or narrowed)
domain, and with the reference otherwise (``guard.py``); the domain is compiled once into a
check of a few microseconds (``domain_check.py``).
"""

from kernelgate.dispatch.domain_check import CompiledDomain, layout_needs
from kernelgate.dispatch.guard import DispatchError, DispatchWarning, GuardedModule, guarded

__all__ = [
    "CompiledDomain",
    "DispatchError",
    "DispatchWarning",
    "GuardedModule",
    "guarded",
    "layout_needs",
]
