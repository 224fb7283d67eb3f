"""Gated linear attention (per-key-channel decay): chunked Triton forward/backward and its
float64 reference recurrence."""

from kernelgate.kernels.gla.chunk import chunk_gla
from kernelgate.kernels.gla.naive import naive_recurrent_gla

__all__ = ["chunk_gla", "naive_recurrent_gla"]
