"""Training small language models on our kernels (issue 22 item 4): multi-query associative
recall (MQAR), one model per member, and the one-step check against the naive recurrence."""

from kernelgate.training.mqar import (
    IGNORE_INDEX,
    MEMBERS,
    MQARConfig,
    MQARModel,
    TokenMixer,
    count_parameters,
    evaluate,
    mqar_batch,
    set_backend,
    step_check,
    train,
)

__all__ = [
    "IGNORE_INDEX",
    "MEMBERS",
    "MQARConfig",
    "MQARModel",
    "TokenMixer",
    "count_parameters",
    "evaluate",
    "mqar_batch",
    "set_backend",
    "step_check",
    "train",
]
