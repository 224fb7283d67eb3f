"""Hostile (template): in forward, a detached helper spawns sleepers up to a bound.

Bounded so that an unconfined run cannot take the machine down: at most
``ARENA.fork_count`` sleepers, each ``sleep`` for ``ARENA.helper_seconds`` and marked with
the arena's token in its environment; the helper stops at the first refused spawn.
"""

import os
import shutil
import sys

import torch
import torch.nn as nn

from kernelgate.redteam.hostile import kit

ARENA = kit.Arena.rendered("__KERNELGATE_HOSTILE_ARENA__")
kit.mark(ARENA)


def _bomb() -> None:
    sleeper = shutil.which("sleep")
    if sleeper:
        argv = [sleeper, str(ARENA.helper_seconds)]
    else:  # no coreutils: a bare interpreter sleeps as well
        argv = [sys.executable, "-S", "-c", f"import time; time.sleep({ARENA.helper_seconds})"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), kit.MARKER_ENV: ARENA.token}
    spawned = 0
    try:
        for _ in range(ARENA.fork_count):
            os.posix_spawn(argv[0], argv, env)
            spawned += 1
    except OSError as exc:
        kit.report(ARENA, "fork-bomb", False, f"stopped after {spawned}: {exc}")
    else:
        kit.report(ARENA, "fork-bomb", True, f"spawned {spawned} sleepers (the bound)")
    for _ in range(ARENA.helper_seconds * 10):  # reap, so that finished sleepers go away
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break


_STARTED: list[bool] = []


class ModelNew(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        if not _STARTED:
            _STARTED.append(True)
            kit.detach(ARENA, _bomb)
        kit.fail_loudly([kit.report(ARENA, "fork-bomb-started", True, "helper detached")])
        return torch.zeros_like(a)
