"""Contract-gated autotuning: search a candidate's launch knobs, never trading correctness.

``knobs``: the knob space, read from the candidate's source (judge side, nothing run);
``pin``: worker side, pins an autotuned kernel to one config; ``search``: the
group-relative policy-gradient search over configs; ``run``: ``tune()``, which evaluates
each config by the contract and the perf layer's timing, and its report.

Kept free of imports here: the worker imports ``kernelgate.tune.pin`` before the candidate.
"""
