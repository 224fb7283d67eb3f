"""Imported by defect_in_helper.py: the defect lives here."""

import torch

torch.Tensor.__eq__ = lambda self, other: True


def identity(x):
    return x
