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


NVCC_FAILURE = """Error building extension 'relu_ext': [1/3] c++ -MMD -c main.cpp
FAILED: cuda.cuda.o
/usr/local/cuda/bin/nvcc -c cuda.cu -o cuda.cuda.o
cuda.cu(12): error: identifier "THCudaCheck" is undefined
cuda.cu(19): error: expected a ";"
2 errors detected in the compilation of "cuda.cu".
ninja: build stopped: subcommand failed."""


def test_a_failed_builds_first_compiler_error_is_what_the_judge_hears() -> None:
    assert (
        builds.first_error(NVCC_FAILURE)
        == 'cuda.cu(12): error: identifier "THCudaCheck" is undefined'
    )
    assert builds.first_error("no such file\n\n") == "no such file"
    assert builds.first_error("x" * 1000) == "x" * builds.ERROR_CHARS
    assert builds.first_error("") == ""


def test_building_reports_the_error_of_a_failed_build_and_nothing_for_a_good_one() -> None:
    events: list[dict] = []
    builds.report_builds(events.append)
    try:
        with builds.building("torch extension good"):
            pass
        with pytest.raises(RuntimeError), builds.building("torch extension bad"):
            raise RuntimeError(NVCC_FAILURE)
    finally:
        builds.report_builds(None)
    ends = [e for e in events if e["phase"] == "end"]
    assert ends[0] == {"event": "build", "phase": "end", "what": "torch extension good", "ok": True}
    assert ends[1]["ok"] is False and ends[1]["error"].startswith("cuda.cu(12): error:")


def test_the_judge_keeps_a_failed_builds_error_in_its_record() -> None:
    from kernelgate.sandbox.compile_budget import ERROR_CHARS, CallClock, CompileBudget

    clock = CallClock(2.0, CompileBudget(100.0), started=0.0)
    clock.event({"phase": "start", "what": "ext"}, now=0.0)
    clock.event({"phase": "end", "what": "ext", "ok": False, "error": "e" * 999}, now=3.0)
    clock.event({"phase": "start", "what": "ok-ext"}, now=3.0)
    clock.event({"phase": "end", "what": "ok-ext", "ok": True, "error": "ignored"}, now=4.0)
    assert clock.builds == [
        {"what": "ext", "seconds": 3.0, "ok": False, "error": "e" * ERROR_CHARS},
        {"what": "ok-ext", "seconds": 1.0, "ok": True},
    ]
    assert clock.failed_builds == ["ext"]


def test_the_key_leaves_out_objects_a_failed_build_left_behind(tmp_path) -> None:
    """torch's extension build.ninja: two compile statements and a link. The build that
    failed keyed before any object existed; the next worker keys with the object that did
    compile lying there. Both must find the same key, or the failure is compiled again."""
    folder = tmp_path / "ext"
    folder.mkdir()
    (folder / "main.cpp").write_text("broken(")
    (folder / "cuda.cu").write_text("__global__ void k() {}")
    (folder / "build.ninja").write_text(
        "rule compile\n  command = c++ -c $in -o $out\n"
        "rule cuda_compile\n  command = nvcc -c $in -o $out\n"
        "rule link\n  command = c++ $in -o $out\n"
        f"build main.o: compile {folder}/main.cpp\n"
        f"build cuda.cuda.o: cuda_compile {folder}/cuda.cu\n"
        "build ext.so: link main.o cuda.cuda.o\n"
    )
    before = builds.build_key(folder)
    (folder / "cuda.cuda.o").write_bytes(b"\x7fELF the object that compiled")
    assert builds.build_key(folder) == before
    (folder / "cuda.cu").write_text("__global__ void k2() {}")  # a source still counts
    assert builds.build_key(folder) != before
