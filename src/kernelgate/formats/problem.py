"""Problem folders: a problem stated as files, and solutions judged against it.

A problem folder holds

* ``problem.yaml``: ``name``, ``precision`` (the dtype the problem is stated in),
  ``tolerance`` (per output dtype, the folder's own correctness rule: ``allclose`` with
  ``atol = rtol = tolerance``), ``forbidden`` (callables and modules a solution must not
  use: FORBID-01), optional ``flops`` and ``bytes`` (formulas over the sizes, kept as text
  for the performance layer);
* ``reference.py``: a KernelBench-style reference (``Model``, ``get_inputs``,
  ``get_init_inputs``, module-level size shims such as ``batch = 16``);
* ``shapes.py``: ``SHAPES``, a list of dicts of those shims: the declared domain.

A solution is a file defining ``Model`` with the reference's constructor. Its weights are
not drawn from a seed but shared: the judge builds the reference's model, and its
``state_dict`` crosses to the worker as tensors, where the solution's model loads it with
``load_state_dict(strict=True)`` (a solution whose parameters differ in name or shape fails
to load, with torch's message). Every declared shape is judged (SHAPES-01: a failure there
rejects; no narrowing mends it); the gates' held-out shapes beyond them can only narrow.
The old check of a problem folder is its own rule (``audit/oldcheck.py``): every declared
shape, the yaml tolerance, three seeds.

The folder is trusted, as a reference is: ``reference.py`` and ``shapes.py`` run in the
judge. The solution is hostile: here it is only parsed.

An audit corpus of problems (format ``problem``) is a folder of runs: each run a folder
with ``solution.py`` and ``run.yaml`` naming its problem (``problem: PATH``, relative to
the run's folder, or absolute) and optionally what the source harness said
(``verdict: accepted`` or ``rejected``).
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from kernelgate.errors import ReferenceError_
from kernelgate.formats.kernelbench import ReferenceProgram, load_reference

if TYPE_CHECKING:
    from kernelgate.gates.base import GateContext
    from kernelgate.static import RuleResult

FORMAT = "problem"
MODEL_CLASS = "Model"  # what a problem's solution defines
SHAPES_RULE = "SHAPES-01"
OLD_CHECK_SEEDS = (0, 1, 2)  # the folder's own rule: three seeds per declared shape
PRECISIONS = ("float32", "float16", "bfloat16", "float64")


class ProblemError(ReferenceError_):
    """A problem folder is malformed: a missing file, a bad key, a shape of unknown sizes."""


@dataclass(frozen=True)
class Problem:
    """A loaded problem folder (see the module's docstring)."""

    folder: Path
    name: str
    precision: str
    tolerance: dict[str, float]
    forbidden: tuple[str, ...]
    shapes: list[dict[str, int]]
    flops: str | None = None
    bytes: str | None = None
    program: ReferenceProgram | None = field(default=None, compare=False, repr=False)

    @property
    def reference(self) -> Path:
        return self.folder / "reference.py"

    def tolerance_for(self, dtype_name: str) -> float:
        """The yaml tolerance of an output of this dtype (else the problem's precision's)."""
        if dtype_name in self.tolerance:
            return self.tolerance[dtype_name]
        return self.tolerance[self.precision]

    def summary(self) -> dict[str, Any]:
        """What a verdict records of the problem it was judged against."""
        return {
            "folder": str(self.folder),
            "name": self.name,
            "precision": self.precision,
            "tolerance": dict(self.tolerance),
            "forbidden": list(self.forbidden),
            "shapes": [dict(s) for s in self.shapes],
            "flops": self.flops,
            "bytes": self.bytes,
        }


def _yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ProblemError(f"cannot read {path}: {exc}") from None
    if not isinstance(data, dict):
        raise ProblemError(f"{path} must hold a mapping (name, precision, tolerance, ...)")
    return data


def _shapes(path: Path, sizes: dict[str, int]) -> list[dict[str, int]]:
    """``SHAPES`` of ``shapes.py``, each a dict of the reference's module-level sizes."""
    if not path.is_file():
        raise ProblemError(f"problem folder lacks shapes.py: {path}")
    name = f"kernelgate_shapes_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise ProblemError(f"{path} failed to import: {type(exc).__name__}: {exc}") from None
    shapes = getattr(module, "SHAPES", None)
    if not isinstance(shapes, list | tuple) or not shapes:
        raise ProblemError(f"{path} must define SHAPES, a non-empty list of dicts")
    checked = []
    for i, shape in enumerate(shapes):
        if not isinstance(shape, dict) or not all(
            isinstance(k, str) and type(v) is int and v > 0 for k, v in shape.items()
        ):
            raise ProblemError(f"{path}: SHAPES[{i}] must be a dict of names to positive ints")
        unknown = sorted(set(shape) - set(sizes))
        if unknown:
            raise ProblemError(
                f"{path}: SHAPES[{i}] sets {', '.join(unknown)}, which reference.py does not "
                f"define as module-level sizes ({', '.join(sorted(sizes)) or 'none'})"
            )
        checked.append(dict(shape))
    return checked


def load_problem(folder: str | Path) -> Problem:
    """Read and check a problem folder; a ``ProblemError`` says what is wrong."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ProblemError(f"problem folder not found: {folder}")
    yaml_path = folder / "problem.yaml"
    if not yaml_path.is_file():
        raise ProblemError(f"problem folder {folder} lacks problem.yaml")
    data = _yaml(yaml_path)
    unknown = sorted(set(data) - {"name", "precision", "tolerance", "forbidden", "flops", "bytes"})
    if unknown:
        raise ProblemError(f"{yaml_path}: unknown key(s) {', '.join(unknown)}")
    name, precision = data.get("name"), data.get("precision", "float32")
    if not isinstance(name, str) or not name:
        raise ProblemError(f"{yaml_path}: `name` must be a non-empty string")
    if precision not in PRECISIONS:
        raise ProblemError(f"{yaml_path}: `precision` must be one of {', '.join(PRECISIONS)}")
    tolerance = data.get("tolerance")
    if isinstance(tolerance, int | float) and not isinstance(tolerance, bool):
        tolerance = {precision: tolerance}
    if not isinstance(tolerance, dict) or not all(
        k in PRECISIONS
        and isinstance(v, int | float)
        and not isinstance(v, bool)
        and math.isfinite(v)
        and v >= 0
        for k, v in tolerance.items()
    ):
        raise ProblemError(
            f"{yaml_path}: `tolerance` must map dtypes ({', '.join(PRECISIONS)}) to "
            "non-negative numbers"
        )
    if precision not in tolerance:
        raise ProblemError(f"{yaml_path}: `tolerance` has no entry for its precision {precision}")
    forbidden = data.get("forbidden") or []
    if not isinstance(forbidden, list) or not all(isinstance(f, str) and f for f in forbidden):
        raise ProblemError(f"{yaml_path}: `forbidden` must be a list of dotted names")
    formulas = {}
    for key in ("flops", "bytes"):
        value = data.get(key)
        if value is not None and not isinstance(value, str | int | float):
            raise ProblemError(f"{yaml_path}: `{key}` must be a formula (text) or a number")
        formulas[key] = None if value is None else str(value)
    program = load_reference(folder / "reference.py")
    return Problem(
        folder=folder,
        name=name,
        precision=precision,
        tolerance={k: float(v) for k, v in tolerance.items()},
        forbidden=tuple(dict.fromkeys(forbidden)),
        shapes=_shapes(folder / "shapes.py", program.sizes),
        flops=formulas["flops"],
        bytes=formulas["bytes"],
        program=program,
    )


# -- weights shared from the reference ------------------------------------------------------


def reference_weights(
    program: ReferenceProgram, init_inputs: list[Any], sizes: dict[str, int] | None = None
) -> tuple[list[str], list[torch.Tensor]]:
    """The reference model's ``state_dict`` at ``sizes`` (names, CPU tensors), built as the
    oracle builds it (KernelBench seeding), so the solution computes with the very weights
    the oracle is cast from."""
    with program.rebound(**(sizes or {})), torch.no_grad():
        state = program.build_model(list(init_inputs)).state_dict()
    names = list(state)
    return names, [state[n].detach().cpu() for n in names]


def sizes_of_key(key: str | None) -> dict[str, int] | None:
    """The sizes a ``Case.sizes_key`` ("a=1,b=2") names; None for the reference's own."""
    if not key:
        return None
    sizes = {}
    for part in key.split(","):
        name, _, value = part.partition("=")
        sizes[name] = int(value)
    return sizes


# -- SHAPES-01: every declared shape judged ------------------------------------------------


def judge_declared_shapes(ctx: GateContext, problem: Problem) -> RuleResult:
    """SHAPES-01: the solution at every shape of ``SHAPES``, one seeded case each, judged
    as CMP-03 judges a held-out shape (the oracle at those sizes, the error model's bound).
    A failure at any of them fails the rule, which rejects: the declared domain is the
    problem's promise, not a domain a verdict may narrow. A hang halts it (the case that
    hung is named); a shape where the trusted reference itself cannot run is a malformed
    problem (``ProblemError``)."""
    from kernelgate.domain import run_or_refusal
    from kernelgate.gates.base import GateAborted, Status
    from kernelgate.gates.outputs import structure_findings
    from kernelgate.static import RuleResult

    if ctx.halted:
        return RuleResult(SHAPES_RULE, Status.SKIPPED, f"not run: {ctx.halted}")
    ctx.gate_id = ctx.session.compile_context = SHAPES_RULE  # for the trace and the budget
    failures: list[str] = []
    for index, sizes in enumerate(problem.shapes):
        label = "declared " + ",".join(f"{k}={v}" for k, v in sizes.items())
        try:
            case = ctx.sized_case(label, ctx.case_seed(SHAPES_RULE, index), sizes)
            expected, dtypes = ctx.expected(case), ctx.output_dtypes(case)
        except Exception as exc:
            raise ProblemError(
                f"{problem.folder}: the reference cannot run at SHAPES[{index}] ({sizes}): "
                f"{type(exc).__name__}: {exc}"
            ) from None
        try:
            outcome = run_or_refusal(ctx, SHAPES_RULE, case, label)
        except GateAborted as exc:
            failures.append(f"{label}: {exc}")
            if ctx.halted:
                break
            continue
        if isinstance(outcome, dict):
            failures.append(f"{label}: raised {outcome['detail'][:200]}")
            continue
        structure = structure_findings(outcome.outputs, expected, dtypes)
        if structure:
            failures.append(f"{label}: output structure differs from the reference")
            continue
        for k, want in enumerate(expected):
            if isinstance(want, torch.Tensor):
                assessment = ctx.assess(case, k, outcome.outputs[k])
                if not assessment.passed:
                    failures.append(
                        f"{label}: output {k} exceeds the {assessment.model} bound "
                        f"({assessment.worst_text})"
                    )
                    break
    shapes = len(problem.shapes)
    if failures:
        return RuleResult(
            SHAPES_RULE,
            Status.FAIL,
            f"{len(failures)} of {shapes} declared shape(s) failed; first: {failures[0]}",
            failures,
        )
    return RuleResult(SHAPES_RULE, Status.PASS, f"all {shapes} declared shape(s) correct")


# -- the audit corpus -----------------------------------------------------------------------


def read_problem_runs(source: Path) -> Iterator[Any]:
    """One ``CorpusRecord`` per run folder of ``source`` (sorted by name); a run that
    cannot be read (no solution, no run.yaml, a problem folder that does not load) is a
    record with ``unreadable`` set."""
    from kernelgate.formats.corpus import CorpusRecord, readable_text

    for run in sorted(p for p in source.iterdir() if p.is_dir()):
        solution, run_yaml = run / "solution.py", run / "run.yaml"
        problem_dir: Path | None = None
        verdict: str | None = None
        why = readable_text(solution, "solution")
        if why is None:
            try:
                data = _yaml(run_yaml) if run_yaml.is_file() else None
                if data is None or not isinstance(data.get("problem"), str):
                    raise ProblemError(f"{run} lacks run.yaml with `problem: PATH`")
                problem_dir = (run / data["problem"]).resolve()
                load_problem(problem_dir)
                if data.get("verdict") in ("accepted", "rejected"):
                    verdict = data["verdict"]
            except ReferenceError_ as exc:
                why = str(exc)
        yield CorpusRecord(
            run.name,
            FORMAT,
            {"run": run.name, "problem": str(problem_dir) if problem_dir else None},
            reference_path=str(problem_dir / "reference.py") if problem_dir else None,
            candidate_path=str(solution),
            source_verdict=verdict,
            unreadable=why,
        )
