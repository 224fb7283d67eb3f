"""Mamba-2's state space duality (SSD) layer: chunked Triton forward/backward and its float64
reference recurrence."""

from kernelgate.kernels.mamba2.chunk import chunk_ssd
from kernelgate.kernels.mamba2.naive import naive_recurrent_ssd

__all__ = ["chunk_ssd", "naive_recurrent_ssd"]
