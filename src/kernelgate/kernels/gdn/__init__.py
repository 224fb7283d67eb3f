"""Gated DeltaNet: chunked Triton forward/backward and its float64 reference recurrence."""

from kernelgate.kernels.gdn.chunk import chunk_gated_delta_rule
from kernelgate.kernels.gdn.naive import naive_recurrent_gated_delta_rule

__all__ = ["chunk_gated_delta_rule", "naive_recurrent_gated_delta_rule"]
