"""The shape every static rule has, and what a rule reports.

A static rule reads the candidate's parsed files (``sources.SourceFile``) and yields
``Hit``s: a file, a line and a message. It never imports or runs candidate code. The
runner (``kernelgate.static.analyse``) turns hits into ``Finding``s and gives each its
severity: a flag (evidence for a reader) by default, ``hard`` (the verdict rejects) when the
rule is hard by nature (FORBID-01) or the contract or an option makes it hard. Keeping the
severity out of the rules means one rule module holds only its own judgement, as a gate does.
"""

from __future__ import annotations

import ast
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar

from kernelgate.serde import Serializable
from kernelgate.static.sources import SourceFile


class Severity(StrEnum):
    FLAG = "flag"  # evidence: the verdict stands, a reader is told
    HARD = "hard"  # the verdict is rejected with this rule in ``failed_rules``


@dataclass
class Finding(Serializable):
    """One static finding: which rule, where (``file:line``), what it saw."""

    rule: str
    file: str
    line: int
    message: str
    severity: Severity = Severity.FLAG

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class Hit:
    """What a rule yields: a node of one of the candidate's files and why it matters."""

    source: SourceFile
    line: int
    message: str


@dataclass
class StaticContext:
    """Everything a rule may look at: the candidate's files and the policy that applies.

    ``float32_contract``: the contract promises float32 results (a downcast is then a
    precision loss, not a choice). ``forbidden``: callables and modules the problem forbids
    (FORBID-01), as dotted names.
    """

    files: list[SourceFile]
    float32_contract: bool = True
    forbidden: tuple[str, ...] = ()
    notes: list[str] = field(default_factory=list)  # files that could not be read or parsed


class Rule(ABC):
    """A static rule: an ``id``, a ``title`` (one line, what it catches) and ``check``."""

    id: ClassVar[str]
    title: ClassVar[str]
    # True for rules whose finding is a rejection whatever the policy (FORBID-01: a problem
    # that forbids a name means it)
    hard_by_nature: ClassVar[bool] = False

    @abstractmethod
    def check(self, ctx: StaticContext) -> Iterator[Hit]:
        """Yield a hit for every place in ``ctx.files`` this rule concerns."""

    def hit(self, source: SourceFile, node: ast.AST, message: str) -> Hit:
        return Hit(source, getattr(node, "lineno", 0), message)
