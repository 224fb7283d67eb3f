"""Hostile (template): ignore SIGTERM, leave a helper that ignores it too, hang in forward.

The hang is bounded (``ARENA.helper_seconds`` times three) so that a judge without a timeout
would still get an answer; the judge's own timeout must end the worker much sooner, and the
helper must not outlive the verification.
"""

import signal
import time

import torch
import torch.nn as nn

from kernelgate.redteam.hostile import kit

ARENA = kit.Arena.rendered("__KERNELGATE_HOSTILE_ARENA__")
kit.mark(ARENA)
signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _linger() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    kit.report(ARENA, "sigterm-helper", True, "helper ignoring SIGTERM is running")
    time.sleep(ARENA.helper_seconds)


_STARTED: list[bool] = []


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if not _STARTED:
            _STARTED.append(True)
            kit.detach(ARENA, _linger)
        deadline = time.monotonic() + 3 * ARENA.helper_seconds
        while time.monotonic() < deadline:
            time.sleep(0.5)
        return torch.zeros_like(a)
