"""The bytecode cache: used only where Python would otherwise recompile torch every time."""

from __future__ import annotations

import sys

import pytest

from kernelgate import bytecode


def test_a_process_that_may_not_write_bytecode_gets_the_cache(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv(bytecode.PREFIX_ENV, raising=False)
    monkeypatch.setattr(sys, "pycache_prefix", None)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setattr(bytecode, "_torch_caches_its_own_bytecode", lambda: True)
    monkeypatch.setattr(sys, "flags", type("F", (), {"dont_write_bytecode": 1})())
    assert bytecode.needs_cache()
    bytecode.use_cache()
    assert sys.pycache_prefix == str(tmp_path / "kernelgate" / "pycache")
    assert sys.dont_write_bytecode is False
    env = bytecode.child_env({"PYTHONDONTWRITEBYTECODE": "1"})
    assert env == {bytecode.PREFIX_ENV: sys.pycache_prefix}


@pytest.mark.parametrize("own_prefix", [True, False])
def test_nothing_changes_in_a_normal_environment(monkeypatch, own_prefix: bool) -> None:
    monkeypatch.setattr(sys, "pycache_prefix", "/somewhere" if own_prefix else None)
    monkeypatch.setattr(sys, "flags", type("F", (), {"dont_write_bytecode": 0})())
    monkeypatch.setattr(bytecode, "_torch_caches_its_own_bytecode", lambda: True)
    monkeypatch.delenv(bytecode.PREFIX_ENV, raising=False)
    assert not bytecode.needs_cache()
    env = bytecode.child_env({"A": "1"})
    assert env.get(bytecode.PREFIX_ENV) == ("/somewhere" if own_prefix else None)
