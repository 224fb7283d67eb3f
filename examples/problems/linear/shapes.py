"""The declared domain: batch varies; the layer's own sizes too (its weights are rebuilt
from the reference at each)."""

SHAPES = [
    {"batch": 16, "in_features": 64, "out_features": 48},
    {"batch": 5, "in_features": 64, "out_features": 48},
    {"batch": 7, "in_features": 33, "out_features": 10},
]
