"""Our own Triton kernels, each with its float64 oracle beside it."""
