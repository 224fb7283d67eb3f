"""Hostile candidates: attacks on the judge itself, not wrong kernels (issue 18).

``catalog.py`` lists them, ``attacks/`` holds their templates, ``kit.py`` what the
templates share, ``runner.py`` judges each in a throwaway arena and checks what it
achieved; ``kernelgate calibrate --hostile`` runs them (docs/security.md).
"""
