import torch
import torch.nn as nn


class ModelNew(nn.Module):
    """Uses the inputs' structure: only k in [i, j] contributes to (A @ B)[i, j]."""

    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.triu(torch.matmul(torch.triu(A), torch.triu(B)))
