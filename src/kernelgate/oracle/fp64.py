"""The float64 oracle and the honest evaluations that the ensemble error model measures.

The reference model is built the way KernelBench builds it (seed 42 before
``get_init_inputs`` and before ``Model``), so the weights are bit-for-bit those the
candidate's ``ModelNew`` gets in the worker. The oracle is a float64 build of that model
applied to float64 copies of the exact input values the candidate receives.

Every model here stays in the mode its constructor leaves it in (training, for an
``nn.Module``), because that is how KernelBench's harness runs both ``Model`` and
``ModelNew``: a reference's BatchNorm normalizes with the batch's statistics. Switching the
oracle to ``eval()`` would judge another function, one in which a candidate that folds
BatchNorm into a convolution with the running statistics looks right. A reference whose
output is not a function of its inputs in that mode (dropout or stochastic depth that is
active, a hidden state carried from call to call) cannot be an oracle; the first evaluation
says so (``ReferenceError_``) instead of judging against noise.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelgate.errors import ReferenceError_
from kernelgate.formats.kernelbench import ReferenceProgram
from kernelgate.inputs.host import to_host
from kernelgate.oracle.compare import ValueClass, value_classes
from kernelgate.oracle.zero_sign import OpenSigns, open_signs


def flatten_outputs(value: Any) -> list[Any]:
    """A model's return value as a flat list (tensors, scalars), in order."""
    if isinstance(value, list | tuple):
        return [item for v in value for item in flatten_outputs(v)]
    return [value]


def cast_values(value: Any, dtype: torch.dtype | None, device: torch.device) -> Any:
    """Tensors in ``value`` (nested lists and tuples too) moved to ``device`` and, where
    floating and ``dtype`` is given, cast to it; everything else as it is."""
    if isinstance(value, torch.Tensor):
        # to the host (results only with KERNELGATE_RESULTS_ON_DEVICE=0, over the judge's
        # device budget or out of memory): pinned, so the copy engine writes it (inputs/host.py)
        value = to_host(value) if torch.device(device).type == "cpu" else value.to(device)
        if dtype is not None and value.is_floating_point():
            value = value.to(dtype)
        return value
    if isinstance(value, list | tuple):
        return type(value)(cast_values(v, dtype, device) for v in value)
    return value


def run_copies(value: Any, dtype: torch.dtype | None, device: torch.device) -> Any:
    """``cast_values(value, dtype, device)`` for one run of the reference, with every tensor
    of ``value`` that lies on a device (the judge's copy of a case's inputs there:
    ``GateContext.oracle_inputs``) and that the cast left as it is (already in ``dtype``,
    or not floating) cloned on that device.

    A reference may write into its inputs, and the device copy is read by every run of its
    case: a run must never change what the next one reads. Cast from the host, every tensor
    is a new upload anyway, so nothing is cloned; on the CPU nothing is either, so the CPU
    path is exactly ``cast_values`` (each caller keeps its own protection there)."""
    if isinstance(value, torch.Tensor):
        cast = cast_values(value, dtype, device)
        if value.device.type != "cpu" and _shares(cast, value):
            cast = cast.clone()
        return cast
    if isinstance(value, list | tuple):
        return type(value)(run_copies(v, dtype, device) for v in value)
    return value


def _shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` is ``b`` or reads its storage (a meta tensor has no address: only the
    object itself counts there)."""
    if a is b:
        return True
    pointer = a.untyped_storage().data_ptr()
    return pointer != 0 and pointer == b.untyped_storage().data_ptr()


# "0": the oracle's results (float64 and honest runs) come to the host, as before they
# stayed on the oracle's device: for an audit to run while the device path is in doubt.
RESULTS_ON_DEVICE_ENV = "KERNELGATE_RESULTS_ON_DEVICE"


def results_device(device: torch.device | str) -> torch.device:
    """Where an oracle on ``device`` keeps its results: on that device, unless it is the CPU
    or ``KERNELGATE_RESULTS_ON_DEVICE=0`` asks for the host.

    Their only use is the judgement of a candidate's output, which runs on the oracle's
    device and finds the candidate's output there already (CUDA IPC): bringing every
    float64 result to the host and uploading it again for judging was a quarter of an H200
    audit's judge CPU (benchmarks/results/judge-profile-h200-2026-12-04.json).
    """
    device = torch.device(device)
    if device.type == "cpu" or os.environ.get(RESULTS_ON_DEVICE_ENV, "1").strip() == "0":
        return torch.device("cpu")
    return device


# "0": every oracle run uploads the case's inputs from the host, as before the judge kept a
# copy of them on the oracle's device (``GateContext.oracle_inputs``).
INPUTS_ON_DEVICE_ENV = "KERNELGATE_INPUTS_ON_DEVICE"


def inputs_on_device(device: torch.device | str) -> bool:
    """Whether the judge keeps a copy of each case's inputs on an oracle's ``device`` for
    the oracle's runs to read: on any device but the CPU, unless
    ``KERNELGATE_INPUTS_ON_DEVICE=0``.

    A case's float64 evaluation, native run, magnitude run, open-sign variants, index-op
    sources and dependence probes each uploaded the case's host inputs again: in the H200
    audit's profile ``cast_values`` took 254 of the judges' 995 CPU seconds, these uploads
    and the results' downloads (which no longer happen: ``results_device``) together
    (benchmarks/results/judge-profile-h200-2026-12-04.json)."""
    device = torch.device(device)
    return device.type != "cpu" and os.environ.get(INPUTS_ON_DEVICE_ENV, "1").strip() != "0"


def held(value: Any, device: torch.device) -> Any:
    """An oracle result (tensors in nested lists and tuples) as the judge keeps it on
    ``device``: on the host through ``cast_values`` (pinned: inputs/host.py); on a device as
    it is, except a view into a larger storage (a reference that returns a slice of an
    intermediate), kept as a compact copy, so what is held is what its bytes are counted
    as (``GateContext._cached``) and no more."""
    if device.type == "cpu":
        return cast_values(value, None, device)
    if isinstance(value, torch.Tensor):
        value = value.to(device)
        if value.untyped_storage().nbytes() > value.numel() * value.element_size():
            value = value.clone()
        return value
    if isinstance(value, list | tuple):
        return type(value)(held(v, device) for v in value)
    return value


def model_in_dtype(
    program: ReferenceProgram,
    init_inputs: list[Any],
    device: torch.device | str,
    dtype: torch.dtype,
) -> torch.nn.Module:
    """The reference model built afresh (same seed, same weights) on ``device``, with every
    floating tensor it holds in ``dtype``.

    Built afresh, not deep-copied: ``copy.deepcopy`` keeps functions as they are, so a model
    that holds a closure over one of its submodules (minGPT's block keeps its MLP as
    ``self.mlpf = lambda x: m.c_proj(...)``) would run the original float32 submodule inside
    the float64 copy. And ``Module.to`` converts parameters and buffers only: references that
    keep state as a plain tensor attribute (CUDA-L1's LSTM and GRU problems hold their initial
    hidden state as ``self.h0 = torch.randn(...)``) would feed float32 state into the float64
    oracle, which torch refuses; those attributes are cast too.
    """
    model = program.build_model(init_inputs).to(device, dtype)
    for module in model.modules():
        for name, value in list(vars(module).items()):
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                setattr(module, name, value.to(device, dtype))
    return model


# Elements compared at a time by ``repeats``: its temporaries (classes, masks, differences)
# stay under a gigabyte on the oracle's device, where whole-output ones were 8 GiB apiece for
# a 1 G-element output (``h100/L2/T34`` ran out of GPU memory there beside other judges).
REPEAT_CHUNK = 1 << 24


def repeats(a: torch.Tensor, b: torch.Tensor, chunk: int = REPEAT_CHUNK) -> bool:
    """Whether two same-shaped evaluations agree: the same value class everywhere, and the
    finite values within float32's unit roundoff of the largest, compared chunk by chunk."""
    u32 = float(torch.finfo(torch.float32).eps) / 2
    flat_a, flat_b = a.reshape(-1), b.reshape(-1)
    scale = worst = 0.0
    for start in range(0, flat_a.numel(), chunk):
        x, y = flat_a[start : start + chunk], flat_b[start : start + chunk]
        classes = value_classes(x)
        if not torch.equal(classes, value_classes(y)):
            return False
        finite = classes == ValueClass.FINITE
        x, y = x.double(), y.double()
        scale = max(scale, float(torch.where(finite, x, 0.0).abs().max()))
        worst = max(worst, float(torch.where(finite, x - y, 0.0).abs().max()))
    return worst <= u32 * scale


@dataclass
class Oracle:
    """Evaluates the trusted reference: in float64 (the law) and honestly in native dtypes."""

    program: ReferenceProgram
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    def __post_init__(self) -> None:
        self.init_inputs = self.program.init_inputs()
        self.model = self.program.build_model(self.init_inputs)
        self.model64 = model_in_dtype(self.program, self.init_inputs, self.device, torch.float64)
        self.model_native = self.model.to(self.device)
        self._cpu_models: dict[torch.dtype, torch.nn.Module] = {}
        self._repeatable_checked = False
        # read once: every result of one verification is kept in one place
        self.results_device = results_device(self.device)

    @torch.no_grad()
    def expected(self, inputs: list[Any]) -> list[Any]:
        """The reference in float64 on the exact input values (results on
        ``results_device``: the oracle's device, or the host). ``inputs`` on the host, or
        the judge's copy of them on the oracle's device, which no run writes into
        (``run_copies``)."""
        values = run_copies(inputs, torch.float64, self.device)
        # a copy for the repeat, taken first: a reference may write into its inputs
        again = None if self._repeatable_checked else copy.deepcopy(values)
        outputs = flatten_outputs(self.model64(*values))
        if again is not None:
            self._check_repeatable(outputs, flatten_outputs(self.model64(*again)))
        return [held(o, self.results_device) for o in outputs]

    def _check_repeatable(self, first: list[Any], second: list[Any]) -> None:
        """The same inputs twice must give the same outputs, up to what float64 reordering
        can change (far below float32's unit roundoff); else the reference is no oracle.
        Marked checked only once it has passed: a check cut short (the device out of
        memory) is made again with the evaluation."""
        for index, (a, b) in enumerate(zip(first, second, strict=True)):
            if not isinstance(a, torch.Tensor):
                same = a == b or (a != a and b != b)  # NaN scalars
            else:
                same = a.shape == b.shape and repeats(a.detach(), b.detach())
            if not same:
                raise ReferenceError_(
                    f"the reference gives different results for the same inputs (output "
                    f"{index}, in float64): it is random or keeps state from call to call in "
                    "the mode it is built in (training, as KernelBench runs it: active "
                    "dropout or stochastic depth, a hidden state updated by forward), so it "
                    "cannot serve as the oracle; make it deterministic (dropout p=0, state "
                    "passed in as an input) and verify again"
                )
        self._repeatable_checked = True

    @torch.no_grad()
    def open_zero_signs(
        self, inputs: list[Any], expected: list[Any], dtypes: list[torch.dtype | None]
    ) -> list[OpenSigns | None]:
        """Per output, where the reference leaves the sign of a zero open, and where the
        class follows from such a sign (``zero_sign``); ``expected`` is ``expected(inputs)``
        and ``dtypes`` the outputs' own dtypes. Up to three more float64 evaluations."""

        def run() -> list[Any]:
            values = run_copies(inputs, torch.float64, self.device)
            if any(v is i for v, i in zip(values, inputs)):  # float64 inputs: the reference
                values = copy.deepcopy(values)  # may write into them, and runs three times
            outputs = flatten_outputs(self.model64(*values))
            return [held(o, self.results_device) for o in outputs]

        return open_signs(run, expected, dtypes)

    @torch.no_grad()
    def native(self, inputs: list[Any]) -> list[Any]:
        """The reference eagerly in the inputs' own dtypes on the oracle's device (results
        on ``results_device``). From the judge's device copy of ``inputs`` a run reads
        clones (``run_copies``): this run casts nothing, and a reference may write into its
        inputs."""
        outputs = self.model_native(*run_copies(inputs, None, self.device))
        return [held(o, self.results_device) for o in flatten_outputs(outputs)]

    @torch.no_grad()
    def op_inputs(
        self, inputs: list[Any], wanted: set[tuple[str, int]], *, native: bool = False
    ) -> dict[tuple[str, int], torch.Tensor]:
        """The inputs of the index ops ``wanted`` (``(op, call)``) as the reference computes
        them on ``inputs`` (host tensors, or the judge's device copy): in float64 (the
        oracle), or natively (``native``: an honest evaluation), for judging index outputs
        (``oracle.output_kinds``). One more evaluation of the reference, made only for
        contracts with index outputs. Kept on ``results_device``, like the oracle's outputs
        they are judged with."""
        from kernelgate.contract.match import OpInputCapture

        capture = OpInputCapture(wanted)
        model = self.model_native if native else self.model64
        values = run_copies(inputs, None if native else torch.float64, self.device)
        values = copy.deepcopy(values) if any(v is i for v, i in zip(values, inputs)) else values
        with capture:
            model(*values)
        return {key: held(value, self.results_device) for key, value in capture.captured.items()}

    @torch.no_grad()
    def on_cpu(self, inputs: list[Any], dtype: torch.dtype) -> list[Any]:
        """The reference in ``dtype`` on the CPU: an honest evaluation independent of device."""
        if dtype not in self._cpu_models:
            self._cpu_models[dtype] = model_in_dtype(self.program, self.init_inputs, "cpu", dtype)
        outputs = self._cpu_models[dtype](*cast_values(inputs, dtype, torch.device("cpu")))
        return flatten_outputs(outputs)

    def honest_run(
        self, inputs: list[Any], cpu_dtype: torch.dtype | None, on_device: list[Any] | None = None
    ) -> list[Any]:
        """One honest evaluation: the native run (``cpu_dtype`` None; from ``on_device``, the
        judge's device copy of ``inputs``, where given), or the reference on the CPU in
        ``cpu_dtype`` (a ``second_implementations`` entry) on the host ``inputs``, its
        results on the host (the judge keeps them on its device: ``GateContext._kept``)."""
        if cpu_dtype is None:
            return self.native(inputs if on_device is None else on_device)
        return self.on_cpu(inputs, cpu_dtype)

    def second_implementations(self, inputs: list[Any], kind: str) -> list[tuple[str, torch.dtype]]:
        """The runs beside ``native-eager`` that ``kind`` asks for, as (name, CPU dtype).

        - ``"native"``: none. The library models use honest runs only to mask honest
          overflows and as a floor, for which the run on the candidate's own device
          suffices; an fp32 CPU run of a KernelBench-sized reference would cost more than
          everything else in a device-mode verification.
        - ``"independent"``: ``cpu-fp32``, when it differs from the native run (another
          device or dtype). The ensemble error model needs that second evaluation.
        - ``"classes"``: ``cpu-fp64``, in device mode: a second implementation for the
          exact class gates, which ask only where implementations disagree on a value's
          class or sign (in CPU mode the oracle itself is that implementation).
        """
        if kind not in ("native", "independent", "classes"):
            raise ValueError(f"unknown kind of honest runs {kind!r}")
        on_device = self.device.type != "cpu"
        low_precision = any(
            isinstance(t, torch.Tensor)
            and t.dtype not in (torch.float32, torch.float64)
            and t.is_floating_point()
            for t in inputs
        )
        if kind == "independent" and (on_device or low_precision):
            return [("cpu-fp32", torch.float32)]
        if kind == "classes" and on_device:
            return [("cpu-fp64", torch.float64)]
        return []

    def magnitude(self, inputs: list[Any], entry_name: str) -> tuple[list[Any], int]:
        """Per-output magnitudes and reduction length N for a library entry's error model.

        The fp64 reference re-runs with the entry's reduction op replaced by its magnitude
        recipe (e.g. ``|A| @ |B|``; see ``contract.match``), on the exact input values
        (host tensors, or the judge's device copy, which the run only reads a cast or clone
        of: ``run_copies``).
        """
        from kernelgate.contract.library import entry
        from kernelgate.contract.match import magnitude

        inputs64 = run_copies(inputs, torch.float64, self.device)
        return magnitude(self.model64, inputs64, entry(entry_name))


@dataclass
class SizedOracle(Oracle):
    """The oracle for the reference with module-level sizes rebound (CMP-03's held-out shapes).

    Construction and every evaluation happen inside ``ReferenceProgram.rebound``, so a
    ``get_init_inputs`` or a ``forward`` that reads those sizes sees the new values; the
    model is built KernelBench's way (seed 42), exactly as the candidate is rebuilt in the
    worker for the same sizes.
    """

    sizes: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        with self.program.rebound(**self.sizes):
            super().__post_init__()

    def expected(self, inputs: list[Any]) -> list[Any]:
        with self.program.rebound(**self.sizes):
            return super().expected(inputs)

    def native(self, inputs: list[Any]) -> list[Any]:
        with self.program.rebound(**self.sizes):
            return super().native(inputs)

    def open_zero_signs(
        self, inputs: list[Any], expected: list[Any], dtypes: list[torch.dtype | None]
    ) -> list[OpenSigns | None]:
        with self.program.rebound(**self.sizes):
            return super().open_zero_signs(inputs, expected, dtypes)

    def on_cpu(self, inputs: list[Any], dtype: torch.dtype) -> list[Any]:
        with self.program.rebound(**self.sizes):
            return super().on_cpu(inputs, dtype)

    def op_inputs(
        self, inputs: list[Any], wanted: set[tuple[str, int]], *, native: bool = False
    ) -> dict[tuple[str, int], torch.Tensor]:
        with self.program.rebound(**self.sizes):
            return super().op_inputs(inputs, wanted, native=native)
