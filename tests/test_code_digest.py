"""The code digest is computed once per source tree, not once per judge process."""

from __future__ import annotations

import pytest

from kernelgate.audit import judge


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    judge.code_digest.cache_clear()
    yield tmp_path / "kernelgate" / judge.CODE_DIGEST_CACHE
    judge.code_digest.cache_clear()


def test_the_digest_is_kept_under_the_exact_sources(fresh_cache) -> None:
    first = judge.code_digest()
    kept = list(fresh_cache.iterdir())
    assert [p.read_text() for p in kept] == [first]
    judge.code_digest.cache_clear()
    assert judge.code_digest() == first


def test_a_garbled_entry_is_computed_again(fresh_cache) -> None:
    first = judge.code_digest()
    (entry,) = fresh_cache.iterdir()
    entry.write_text("not a digest")
    judge.code_digest.cache_clear()
    assert judge.code_digest() == first
    assert entry.read_text() == first
