"""Kimi Delta Attention (the gated delta rule with per-key-channel decay): chunked Triton
forward/backward and its float64 reference recurrence."""

from kernelgate.kernels.kda.chunk import chunk_kda
from kernelgate.kernels.kda.naive import naive_recurrent_kda

__all__ = ["chunk_kda", "naive_recurrent_kda"]
