"""Seeded input generation: value distributions, special values, layouts and guard bands."""
