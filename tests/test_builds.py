"""A failed extension build is replayed, not repeated (sandbox/builds.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch_cpp = pytest.importorskip("torch.utils.cpp_extension")

from kernelgate.sandbox import builds  # noqa: E402


def _build_folder(tmp_path: Path, source: str = "int main() { syntax error }") -> Path:
    folder = tmp_path / "ext"
    folder.mkdir()
    (folder / "main.cpp").write_text(source)
    (folder / "build.ninja").write_text(
        f"rule compile\n  command = c++ -c $in -o $out\nbuild main.o: compile {folder}/main.cpp\n"
    )
    return folder


@pytest.fixture
def fake_ninja(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """torch's ninja step replaced by one that fails as a compiler would, counting runs."""
    runs: list[str] = []

    def run(build_directory: str, verbose: bool, error_prefix: str) -> None:
        runs.append(build_directory)
        outcome = Path(build_directory, "outcome.txt")
        message = outcome.read_text() if outcome.exists() else "main.cpp:1: error: expected ';'"
        raise RuntimeError(f"{error_prefix}: {message}")

    monkeypatch.setattr(torch_cpp, "_run_ninja_build", run)
    return runs


def test_a_failed_build_is_replayed_with_the_same_error(tmp_path, fake_ninja) -> None:
    folder = _build_folder(tmp_path)
    builds.remember_failed_builds()
    with pytest.raises(RuntimeError) as first:
        torch_cpp._run_ninja_build(str(folder), False, "Error building extension 'x'")
    with pytest.raises(RuntimeError) as again:
        torch_cpp._run_ninja_build(str(folder), False, "Error building extension 'x'")
    assert len(fake_ninja) == 1  # the second build never ran
    assert str(again.value) == str(first.value)
    assert "expected ';'" in str(again.value)


def test_changed_sources_build_again(tmp_path, fake_ninja) -> None:
    folder = _build_folder(tmp_path)
    builds.remember_failed_builds()
    with pytest.raises(RuntimeError):
        torch_cpp._run_ninja_build(str(folder), False, "e")
    (folder / "main.cpp").write_text("int main() { return 0; }")
    with pytest.raises(RuntimeError):
        torch_cpp._run_ninja_build(str(folder), False, "e")
    assert len(fake_ninja) == 2


def test_a_killed_build_is_not_remembered(tmp_path, fake_ninja) -> None:
    folder = _build_folder(tmp_path)
    (folder / "outcome.txt").write_text("nvcc: Killed")
    builds.remember_failed_builds()
    for _ in range(2):
        with pytest.raises(RuntimeError, match="Killed"):
            torch_cpp._run_ninja_build(str(folder), False, "e")
    assert len(fake_ninja) == 2


def test_installing_twice_wraps_once(fake_ninja) -> None:
    builds.remember_failed_builds()
    wrapped = torch_cpp._run_ninja_build
    builds.remember_failed_builds()
    assert torch_cpp._run_ninja_build is wrapped


def test_the_key_covers_build_file_and_sources(tmp_path) -> None:
    folder = _build_folder(tmp_path)
    key = builds.build_key(folder)
    assert key is not None and key == builds.build_key(folder)
    (folder / "main.cpp").write_text("int main() { return 1; }")
    assert builds.build_key(folder) != key
    assert builds.build_key(tmp_path / "missing") is None


def test_wrapped_when_imported_later(tmp_path) -> None:
    """In a fresh interpreter that has not imported torch's extension builder yet, the wrap
    waits for the candidate's import instead of importing it itself."""
    import subprocess
    import sys

    code = (
        "import sys; from kernelgate.sandbox import builds; builds.remember_failed_builds();"
        "print(builds.EXTENSION_MODULE in sys.modules);"
        "from torch.utils import cpp_extension;"
        "print(getattr(cpp_extension._run_ninja_build, '_kernelgate_remembers', False))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]
