"""Dataclass <-> JSON-ready dict conversion for the versioned data types.

Contracts, verdicts and evidence are plain dataclasses. This module gives them a lossless
JSON form without a schema library: enums become their values, nested dataclasses become
dicts, and unions of dataclasses are told apart by which fields a dict carries.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from enum import Enum
from pathlib import Path
from typing import Any, Self, TypeVar, get_args, get_origin

T = TypeVar("T")


def to_jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, float) and value != value:  # NaN is not JSON
        return "nan"
    if isinstance(value, float) and value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return value


def _fits(cls: type, data: dict[str, Any]) -> bool:
    fields = {f.name: f for f in dataclasses.fields(cls)}
    required = {
        name
        for name, f in fields.items()
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    }
    return required <= data.keys() <= fields.keys()


def from_jsonable(tp: Any, data: Any) -> Any:
    """Rebuild a value of type ``tp`` from its JSON form (the inverse of ``to_jsonable``)."""
    origin = get_origin(tp)
    if tp is Any or tp is None or tp is type(None):
        return data
    if origin in (typing.Union, types.UnionType):
        options = [a for a in get_args(tp) if a is not type(None)]
        if data is None:
            return None
        for option in options:
            if dataclasses.is_dataclass(option) and isinstance(data, dict) and _fits(option, data):
                return from_jsonable(option, data)
        for option in options:
            if not dataclasses.is_dataclass(option):
                try:
                    return from_jsonable(option, data)
                except (TypeError, ValueError):
                    continue
        raise ValueError(f"{data!r} matches none of {tp}")
    if origin in (list, tuple):
        (item,) = get_args(tp)[:1] or (Any,)
        return [from_jsonable(item, v) for v in data]
    if origin is dict:
        _, value_type = get_args(tp) or (Any, Any)
        return {k: from_jsonable(value_type, v) for k, v in data.items()}
    if isinstance(tp, type) and issubclass(tp, Enum):
        return tp(data)
    if dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise TypeError(f"expected a table for {tp.__name__}, got {data!r}")
        hints = typing.get_type_hints(tp)
        known = {f.name for f in dataclasses.fields(tp)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown field(s) for {tp.__name__}: {', '.join(sorted(unknown))}")
        return tp(**{k: from_jsonable(hints[k], v) for k, v in data.items()})
    if tp is float and isinstance(data, str):
        return float(data)
    if tp in (int, float, str, bool) and not isinstance(data, tp):
        if tp is float and isinstance(data, int) and not isinstance(data, bool):
            return float(data)
        raise TypeError(f"expected {tp.__name__}, got {data!r}")
    return data


class Serializable:
    """Mixin for dataclasses with a JSON form."""

    def to_dict(self) -> dict[str, Any]:
        return to_jsonable(self)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Self:
        return from_jsonable(cls, data)

    @classmethod
    def from_json(cls, text: str) -> Self:
        return cls.from_dict(json.loads(text))
