"""DeltaNet (the delta rule without decay): chunked Triton forward/backward and its float64
reference recurrence."""

from kernelgate.kernels.delta_rule.chunk import chunk_delta_rule
from kernelgate.kernels.delta_rule.naive import naive_recurrent_delta_rule

__all__ = ["chunk_delta_rule", "naive_recurrent_delta_rule"]
