"""Readers for the formats candidates and references arrive in."""
