"""Test candidate (clocks): an exact elementwise add that gives up (raises) when two reads
of the clock around it are more than 20 ms apart, which never happens with real clocks
here and always happens in CMP-01's ``faster`` instance (its first intervals are ~30 ms).
"""

import time

import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        started = time.monotonic()
        out = a + b
        if time.monotonic() - started > 0.02:
            raise TimeoutError("the add took more than 20 ms")
        return out
