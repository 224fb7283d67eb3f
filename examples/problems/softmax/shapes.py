"""The declared domain: every shape here is judged (SHAPES-01)."""

SHAPES = [
    {"batch": 8, "dim": 100},
    {"batch": 3, "dim": 257},
    {"batch": 1, "dim": 1024},
]
