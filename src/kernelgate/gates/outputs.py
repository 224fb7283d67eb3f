"""Structural checks every value-comparing gate makes before comparing values."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import torch

from kernelgate.sandbox.wire import dtype_name


def structure_findings(
    actual: list[Any], expected: list[Any], dtypes: list[torch.dtype | None]
) -> list[dict[str, Any]]:
    """Differences in output count, kind, shape and dtype (``dtypes``: the reference's own,
    ``GateContext.output_dtypes``; count, kinds and shapes are the float64 oracle's)."""
    if len(actual) != len(expected):
        return [{"problem": "output count", "expected": len(expected), "actual": len(actual)}]
    findings: list[dict[str, Any]] = []
    for index, (got, want, dtype) in enumerate(zip(actual, expected, dtypes)):
        if isinstance(want, torch.Tensor) != isinstance(got, torch.Tensor):
            findings.append(
                {
                    "output": index,
                    "problem": "kind",
                    "expected": type(want).__name__,
                    "actual": type(got).__name__,
                }
            )
        elif isinstance(want, torch.Tensor):
            if tuple(got.shape) != tuple(want.shape):
                findings.append(
                    {
                        "output": index,
                        "problem": "shape",
                        "expected": list(want.shape),
                        "actual": list(got.shape),
                    }
                )
            elif got.dtype != dtype:
                findings.append(
                    {
                        "output": index,
                        "problem": "dtype",
                        "expected": dtype_name(dtype),
                        "actual": dtype_name(got.dtype),
                    }
                )
    return findings


def tensor_outputs(outputs: list[Any]) -> list[tuple[int, Any]]:
    return [(i, o) for i, o in enumerate(outputs) if isinstance(o, torch.Tensor)]


class PositionCounts:
    """A dataclass of int counters an exact class gate sums over outputs and cases."""

    def add(self, other: PositionCounts) -> None:
        for counter in dataclasses.fields(self):  # type: ignore[arg-type]
            name = counter.name
            setattr(self, name, getattr(self, name) + getattr(other, name))


CountsT = TypeVar("CountsT", bound=PositionCounts)


@dataclass
class ClassJudgement(Generic[CountsT]):
    """One output judged position by position (EXC-01, EXC-02): what was counted, and the
    mismatched positions with the first few as findings (none: the output passed)."""

    counts: CountsT
    mismatched: int = 0
    findings: list[dict[str, Any]] = field(default_factory=list)
