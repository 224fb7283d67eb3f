"""Resuming a store written before a setting existed (``SETTINGS_ADDED_LATER``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelgate.audit.store import STORE_NAME, ResultStore
from kernelgate.errors import KernelgateError
from kernelgate.sandbox.compile_budget import DEFAULT_COMPILE_TIMEOUT

OLD_SETTINGS = {"source": "/x/h100.jsonl", "device": "cuda", "timeout": 60.0, "seed": 0}


def old_store(folder: Path) -> None:
    """A store as an audit before --compile-timeout wrote it: no compile_timeout setting."""
    store = ResultStore.open(folder, resume=False, settings=OLD_SETTINGS)
    assert "compile_timeout" not in store.settings()
    store.close()


def test_a_store_from_before_compile_timeout_resumes_with_the_default(tmp_path: Path) -> None:
    old_store(tmp_path)
    settings = OLD_SETTINGS | {"compile_timeout": DEFAULT_COMPILE_TIMEOUT}
    ResultStore.open(tmp_path, resume=True, settings=settings).close()
    assert (tmp_path / STORE_NAME).exists()


def test_a_store_from_before_compile_timeout_refuses_another_budget(tmp_path: Path) -> None:
    old_store(tmp_path)
    settings = OLD_SETTINGS | {"compile_timeout": 30.0}
    with pytest.raises(KernelgateError, match=r"compile_timeout differ"):
        ResultStore.open(tmp_path, resume=True, settings=settings)
    store = ResultStore.open(
        tmp_path, resume=True, settings=OLD_SETTINGS | {"compile_timeout": DEFAULT_COMPILE_TIMEOUT}
    )
    assert "compile_timeout" not in store.settings()  # the refusal changed nothing recorded
    store.close()
