"""The fp64 oracle, the error models that derive tolerances, and exact comparisons."""
