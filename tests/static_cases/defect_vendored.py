"""STATIC-VENDORED: a pasted third-party kernel source, license header and all."""

import torch.nn as nn

PASTED = """
// SPDX-License-Identifier: BSD-3-Clause
// pasted from the upstream library's softmax kernel
"""


class ModelNew(nn.Module):
    def forward(self, x):
        return x * 2
