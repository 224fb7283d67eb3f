"""Derive a contract from a KernelBench reference program.

Which module-level sizes may vary is found by re-running the *reference* with each size
rebound to probe values: a size varies if the reference still builds inputs, constructs and
runs at every probe. The candidate is never consulted. Tensor dims are named after the size
whose rebinding moves them; dims that no size moves are literal.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from typing import Any

import torch

from kernelgate.contract.spec import (
    Contract,
    Dim,
    ErrorModelSpec,
    OutputSpec,
    Postcondition,
    Provenance,
    ScalarSpec,
    TensorSpec,
)
from kernelgate.formats.kernelbench import ReferenceProgram
from kernelgate.inputs.distributions import structure_of
from kernelgate.oracle.fp64 import cast_values, flatten_outputs
from kernelgate.sandbox.wire import dtype_name

PROBE_NUMEL_LIMIT = 1 << 24  # skip probes that would build inputs larger than this
STRUCTURE_SEED = 43  # get_inputs() is seeded 42 everywhere else; zeros both share are built in


@torch.no_grad()
def shape_run(
    model: torch.nn.Module,
    inputs: list[Any],
    mode_factory: Callable[[], Any] = contextlib.nullcontext,
) -> tuple[list[Any], Any]:
    """The reference's outputs on ``inputs``, computed for their shapes and dtypes only.

    Tried on the meta device first (no arithmetic: a KernelBench-sized reference took a
    minute of CPU time per derivation, at half a dozen full-size probes), then on the CPU
    for references that meta kernels cannot run (data-dependent ops, tensors the forward
    creates on the CPU). ``mode_factory`` makes a fresh dispatch mode (an op recorder) for
    each attempt; the mode of the attempt that ran is returned beside the outputs. Errors
    of the CPU attempt propagate: that is the reference failing.
    """
    try:
        mode = mode_factory()
        meta_model = copy.deepcopy(model).to("meta")
        with mode:
            outputs = flatten_outputs(meta_model(*cast_values(inputs, None, torch.device("meta"))))
        return outputs, mode
    except Exception:
        mode = mode_factory()
        with mode:
            outputs = flatten_outputs(model(*inputs))
        return outputs, mode


def _shapes(values: list[Any]) -> list[tuple[int, ...] | None]:
    return [tuple(v.shape) if isinstance(v, torch.Tensor) else None for v in values]


def _probes(reference: int) -> list[int]:
    return sorted({p for p in (1, 3, reference + 1) if p != reference and p >= 1})


@torch.no_grad()
def _runs_at(program: ReferenceProgram, name: str, value: int, ref_numel: int) -> tuple[bool, Any]:
    """Whether the reference runs with ``name`` rebound to ``value``, and the shapes it made.

    The shapes are returned even when the model rejects the inputs, so a size that moves an
    input dim but that the reference cannot run at is still named (as a fixed dim).
    """
    with program.rebound(**{name: value}):
        try:
            inputs = program.inputs(seed=42)
        except Exception:
            return False, None
        numel = sum(v.numel() for v in inputs if isinstance(v, torch.Tensor))
        if numel > max(PROBE_NUMEL_LIMIT, 2 * ref_numel):
            return False, None
        try:
            model = program.build_model(program.init_inputs())
            outputs = _shapes(shape_run(model, inputs)[0])
        except Exception:
            return False, (_shapes(inputs), [])
    return True, (_shapes(inputs), outputs)


def derive_contract(program: ReferenceProgram) -> Contract:
    inputs = program.inputs(seed=42)
    outputs, _ = shape_run(program.build_model(program.init_inputs()), inputs)
    base_shapes = (_shapes(inputs), _shapes(outputs))
    ref_numel = sum(v.numel() for v in inputs if isinstance(v, torch.Tensor))

    dims: list[Dim] = []
    # (0 for inputs / 1 for outputs, index, axis) -> dim name
    symbol: dict[tuple[int, int, int], str] = {}
    for name, value in program.sizes.items():
        if value < 1:
            continue
        moved: set[tuple[int, int, int]] = set()
        works = True
        for probe in _probes(value):
            ok, shapes = _runs_at(program, name, probe, ref_numel)
            works &= ok
            if shapes is None:
                continue
            for side in (0, 1):
                for i, (before, after) in enumerate(zip(base_shapes[side], shapes[side])):
                    if before is None or after is None or len(before) != len(after):
                        continue
                    moved |= {
                        (side, i, axis) for axis, (a, b) in enumerate(zip(before, after)) if a != b
                    }
        if not moved:
            continue  # not a size of any input (a hyperparameter, or a weight size only)
        dims.append(Dim(name=name, reference=value, min=1, varies=works))
        for key in moved:
            symbol.setdefault(key, name)

    resampled = program.inputs(seed=STRUCTURE_SEED)  # a second draw, for zero structure
    specs: list[TensorSpec | ScalarSpec] = []
    for i, value in enumerate(inputs):
        if isinstance(value, torch.Tensor):
            again = resampled[i] if i < len(resampled) else None
            samples = [value] + ([again] if isinstance(again, torch.Tensor) else [])
            specs.append(
                TensorSpec(
                    name=f"arg{i}",
                    shape=[symbol.get((0, i, axis), size) for axis, size in enumerate(value.shape)],
                    dtypes=[dtype_name(value.dtype)],
                    integer_values=None if value.is_floating_point() else "reference",
                    structure=structure_of(samples),
                )
            )
        else:
            specs.append(ScalarSpec(name=f"arg{i}", value=value))
    out_specs = [
        OutputSpec(
            name=f"out{k}",
            shape=[symbol.get((1, k, axis), size) for axis, size in enumerate(o.shape)],
            dtype=dtype_name(o.dtype),
        )
        for k, o in enumerate(outputs)
        if isinstance(o, torch.Tensor)
    ]
    return Contract(
        name=program.path.stem,
        dims=dims,
        inputs=specs,
        outputs=out_specs,
        postcondition=Postcondition(
            reference=str(program.path), error_model=ErrorModelSpec("ensemble")
        ),
        provenance=Provenance(
            source="derived",
            detail=f"derived from KernelBench reference {program.path.name} by rebinding its "
            f"module-level sizes ({', '.join(program.sizes) or 'none'}) and re-running it",
            reference_sha256=program.sha256,
        ),
    )


def contract_for(program: ReferenceProgram) -> Contract:
    """The contract a reference gets when none is given: its built-in library entry when the
    reference calls exactly that op (provenance ``library``), derived otherwise.

    The library contract is built on the derived one (the dims found by re-running the
    reference at other sizes), so both agree on shapes and differ in what they promise.
    """
    from kernelgate.contract.match import library_contract

    derived = derive_contract(program)
    return library_contract(program, derived) or derived
