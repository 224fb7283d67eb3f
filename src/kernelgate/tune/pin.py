"""Worker side of the tuner: pin an autotuned kernel to one of its configs.

Installed by the worker before the candidate is imported (and before the clocks of
``sandbox/clocks.py``, which then see a tuning left with one config: no choice, nothing
recorded, so CMP-01 judges the pinned config and no other). ``Autotuner.prune_configs``
is wrapped to return only the pinned config of each named kernel; Triton then never times
anything, which is also what lets the tuner run under the interpreter.

Runs in the worker, beside hostile code: what the judge trusts is still only the outputs
it gets back and its own timing, never this module's word that a pin held.
"""

from __future__ import annotations

from typing import Any


def kernel_name(tuner: Any) -> str:
    """The name of the ``@triton.jit`` function an ``Autotuner`` wraps."""
    fn = getattr(tuner, "base_fn", None) or getattr(tuner, "fn", None)
    return str(getattr(fn, "__name__", "?"))


def install_pins(pins: dict[str, int]) -> None:
    """Make each kernel named in ``pins`` use only its config at that index. A pin that
    cannot be installed raises: the load fails, rather than the judge timing and judging
    whatever Triton would have picked under the pinned config's name."""
    if not pins:
        return
    from triton.runtime.autotuner import Autotuner

    prune = getattr(Autotuner, "prune_configs", None)
    if prune is None:
        raise RuntimeError("autotune pins not installed: no Autotuner.prune_configs")

    def prune_configs(tuner: Any, *args: Any, **kwargs: Any) -> list[Any]:
        configs = list(prune(tuner, *args, **kwargs))
        index = pins.get(kernel_name(tuner))
        if index is None:
            return configs
        every = list(tuner.configs)  # the pin indexes the declared list, as the judge read it
        if not 0 <= index < len(every):
            raise IndexError(
                f"autotune pin {index} of {kernel_name(tuner)} is outside its {len(every)} configs"
            )
        return [every[index]]

    Autotuner.prune_configs = prune_configs
