"""Contracts from files: TOML (hand-written) or the JSON form a verdict carries."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from kernelgate.contract.spec import CONTRACT_SCHEMA, READABLE_SCHEMAS, Contract
from kernelgate.errors import ContractError


def load_contract(path: str | Path) -> Contract:
    path = Path(path)
    if not path.is_file():
        raise ContractError(f"contract file not found: {path}")
    try:
        data = (
            tomllib.loads(path.read_text())
            if path.suffix == ".toml"
            else json.loads(path.read_text())
        )
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as exc:
        raise ContractError(
            f"contract {path} is not valid {path.suffix[1:].upper()}: {exc}"
        ) from None
    schema = data.setdefault("schema", CONTRACT_SCHEMA)
    if schema not in READABLE_SCHEMAS:
        raise ContractError(
            f"contract {path} has schema {schema!r}; this kernelgate reads "
            f"{', '.join(map(repr, READABLE_SCHEMAS))}"
        )
    data["schema"] = CONTRACT_SCHEMA  # an older form reads as the same contract in this one
    data.setdefault("provenance", {"source": "file", "detail": str(path)})
    try:
        return Contract.from_dict(data)
    except (TypeError, ValueError, KeyError) as exc:
        raise ContractError(f"contract {path} is malformed: {exc}") from None
