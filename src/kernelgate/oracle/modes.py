"""The base of the judge's own ``TorchDispatchMode``s, which must not import dynamo.

Why: torch wraps the ``__torch_dispatch__`` of every ``TorchDispatchMode`` subclass in
``torch._disable_dynamo``, so that ``torch.compile`` does not trace into it; that wrapper
imports ``torch._dynamo`` (and with it parts of inductor and Triton's compiler) on its
first call: 2 s of CPU after a bare ``import torch``, 1.1 s in a process that has verified
(the rest is imported anyway), in every judge, CLI or audit process that matches a contract
or runs the zero-sign oracle, for a guard against a compiler the judge never calls. (torch's Python
reference implementations, which run for meta tensors, import it as well: a derivation whose
meta run reaches one, such as ``a + b``, still pays it; the softmax's does not.)

The judge's modes run the *reference* (op recording, magnitudes, zero signs), never
``torch.compile``, so they opt out of that wrapper. The worker's mode (``forbidden_watch``)
sees candidate code, which may compile: it keeps torch's default.
"""

from __future__ import annotations

from torch.utils._python_dispatch import TorchDispatchMode


class JudgeDispatchMode(TorchDispatchMode):
    """A ``TorchDispatchMode`` for the judge's runs of a reference: its ``__torch_dispatch__``
    is called as written, without torch's lazy import of dynamo (the module says why)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False
