"""What FORBID-01's dynamic half costs a candidate call (sandbox/forbidden_watch.py).

Watches a candidate in this process, as the worker does, and times its ``forward`` with
and without the watch (best of five rounds of 300 calls): the extra microseconds per call
and per torch call the candidate makes. Run:

    PYTHONPATH=src .venv/bin/python benchmarks/forbidden_watch_cost.py
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from kernelgate.sandbox.forbidden_watch import ForbiddenWatch

ROOT = Path(__file__).parent.parent
CASES = [
    # (candidate, its argument, forbidden names, class)
    (ROOT / "tests/data/forbid/sorted_allowed.py", [8], ("torch.topk",), "ModelNew"),
    (ROOT / "examples/problems/softmax/solution.py", [], ("torch.softmax",), "Model"),
    (ROOT / "examples/problems/linear/solution.py", [64, 48], ("fla.ops.kda",), "Model"),
]


class Counter(torch.overrides.TorchFunctionMode):
    """Counts the torch calls of one forward."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.calls += 1
        return func(*args, **(kwargs or {}))


def per_call(forward: Callable[[], Any], watch: ForbiddenWatch | None, calls: int = 300) -> float:
    """Seconds a call, best of five rounds, under ``watch`` (None: unwatched)."""
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(calls):
            if watch is not None:
                with watch.watching("call"):
                    forward()
            else:
                forward()
        best = min(best, time.perf_counter() - started)
    return best / calls


def main() -> None:
    for path, init, forbidden, class_name in CASES:
        name = f"cost_{path.parent.name}_{path.stem}"
        watch = ForbiddenWatch(forbidden, str(path), name)
        watch.install()
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        model = getattr(module, class_name)(*init)
        x = torch.randn(14, init[0] if len(init) == 2 else 100)
        counter = Counter()
        with counter:
            model(x)

        forward = functools.partial(model, x)
        per_call(forward, watch, 20)
        plain, watched = per_call(forward, None), per_call(forward, watch)
        extra = watched - plain
        print(
            f"{path.relative_to(ROOT)}: {counter.calls} torch calls, {plain * 1e6:.0f} us "
            f"plain, {watched * 1e6:.0f} us watched (aten layer {'on' if watch._aten else 'off'})"
            f": +{extra * 1e6:.0f} us a call, +{extra * 1e6 / max(counter.calls, 1):.0f} us "
            "a torch call"
        )
        watch.uninstall()


if __name__ == "__main__":
    main()
